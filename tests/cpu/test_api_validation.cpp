// Argument validation of the C API, on the CPU (no GPU needed): every bad input returns its
// status at once with a message naming the offending argument. Each case starts from valid
// arguments and breaks one thing; cases whose input is valid break a later argument on purpose
// (the workspace) to show that validation let the first one through.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <ostream>
#include <limits>
#include <string>
#include <vector>

#include "cpu/test_api_setup.h"
#include "kernels/backward/backward.h"
#include "kernels/forward/forward.h"

namespace flamia_test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename Setup>
struct Case {
  std::string name;
  std::function<void(Setup&)> mutate;
  flamia_status expected;
  std::vector<std::string> message_parts;  // each must appear in the message
};
template <typename Setup>
void PrintTo(const Case<Setup>& c, std::ostream* os) {
  *os << c.name;
}
using ForwardCase = Case<ForwardSetup>;
using BackwardCase = Case<BackwardSetup>;

template <typename Setup>
std::string case_name(const ::testing::TestParamInfo<Case<Setup>>& info) {
  return info.param.name;
}

// Leaves a known, unrelated message behind, so that a stale message can never match.
void reset_message() {
  flamia_forward(nullptr);
}

template <typename Setup, typename Call>
void expect_case(const Case<Setup>& c, const char* entry_point, Call call) {
  Setup setup;
  c.mutate(setup);
  reset_message();
  const flamia_status status = call(&setup.args);
  const char* message = flamia_last_error_message();
  EXPECT_EQ(status, c.expected) << flamia_status_name(status) << ": " << message;
  EXPECT_TRUE(contains(message, std::string(entry_point) + ": ")) << message;
  for (const std::string& part : c.message_parts) {
    EXPECT_TRUE(contains(message, part)) << "'" << part << "' not in: " << message;
  }
}

// ---- cases shared by both passes (the problem and the workspace) ---------------------------

template <typename Setup>
std::vector<Case<Setup>> problem_cases() {
  using C = Case<Setup>;
  auto problem = [](auto change) {
    return [change](Setup& s) {
      change(s.args.problem);
      s.relayout();
    };
  };
  auto without_workspace = [](Setup& s) { s.args.workspace = nullptr; };
  std::vector<C> cases = {
      {"BatchZero",
       problem([](flamia_problem& p) { p.batch = 0; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.batch (0)"}},
      {"BatchNegative",
       problem([](flamia_problem& p) { p.batch = -3; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.batch (-3)"}},
      {"BatchTooLarge",
       problem([](flamia_problem& p) { p.batch = std::numeric_limits<int32_t>::max(); }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.batch (2147483647)", "split the batch"}},
      {"BatchAboveDocumentLimit",
       problem([](flamia_problem& p) { p.batch = (1 << 23) + 1; }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.batch (8388609)", "8388608 documents"}},
      {"TotalKAboveTokenLimit",
       problem([](flamia_problem& p) {
         p.total_q = p.total_k = std::numeric_limits<int32_t>::max() - 255;
       }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.total_q (2147483392)", "2147483391 tokens"}},
      {"TotalsAtTokenLimitAccepted",  // the limit itself is valid: the workspace fails next
       [](Setup& s) {
         // one head: with more the query rows (heads_q x total_q) pass their own limit
         s.args.problem.heads_q = s.args.problem.heads_kv = 1;
         s.args.problem.total_q = s.args.problem.total_k =
             std::numeric_limits<int32_t>::max() - 256;
         s.args.problem.max_seqlen_q = s.args.problem.max_seqlen_k = 113;
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace"}},
      {"TotalQNegative",
       problem([](flamia_problem& p) { p.total_q = -1; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.total_q (-1)"}},
      {"TotalKNegative",
       problem([](flamia_problem& p) { p.total_k = -5; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.total_k (-5)"}},
      {"HeadsQZero",
       problem([](flamia_problem& p) { p.heads_q = 0; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.heads_q (0)"}},
      {"HeadsKvNegative",
       problem([](flamia_problem& p) { p.heads_kv = -2; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.heads_kv (-2)"}},
      // heads x head_dim must stay 32-bit in the kernels' TMA coordinates (2^24 + 1 heads at
      // head dim 128 read KV head 2^24's V̂ᵀ at coordinate -2^31: zeros)
      {"HeadsQAboveLimit",
       problem([](flamia_problem& p) {
         p.heads_q = (1 << 24) + 1;
         p.heads_kv = 1;
       }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.heads_q (16777217)", "4194304 query heads"}},
      {"HeadsQJustAboveLimit",
       problem([](flamia_problem& p) { p.heads_q = (1 << 22) + 2; }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.heads_q (4194306)", "4194304 query heads"}},
      {"HeadsQAtLimitAccepted",  // the limit itself is valid: the workspace fails next
       [](Setup& s) {
         s.args.problem.heads_q = s.args.problem.heads_kv = 1 << 22;
         s.relayout();
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace"}},
      // the forward plan counts heads_q x (query tiles) work items in 32 bits
      {"QueryRowsAboveLimit",
       problem([](flamia_problem& p) {
         p.heads_q = 2;
         p.total_q = p.total_k = 1073741696;  // 2 x = 2^31 - 256
       }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"2 x 1073741696 = 2147483392 query rows", "2147483391"}},
      {"QueryRowsBelowLimitAccepted",  // valid (TotalsAtTokenLimitAccepted: at the limit)
       [](Setup& s) {
         s.args.problem.heads_q = 2;
         s.args.problem.total_q = s.args.problem.total_k = 1073741695;  // 2 x = 2^31 - 258
         s.relayout();
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace"}},
      {"HeadsNotMultiple",
       problem([](flamia_problem& p) {
         p.heads_q = 6;
         p.heads_kv = 4;
       }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.heads_q (6)", "multiple of problem.heads_kv (4)"}},
      {"HeadDimZero",
       problem([](flamia_problem& p) { p.head_dim = 0; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.head_dim (0)"}},
      {"HeadDimNegative",
       problem([](flamia_problem& p) { p.head_dim = -64; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.head_dim (-64)"}},
      {"MaxSeqlenQZero",
       problem([](flamia_problem& p) { p.max_seqlen_q = 0; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.max_seqlen_q (0)"}},
      {"MaxSeqlenKNegative",
       problem([](flamia_problem& p) { p.max_seqlen_k = -1; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.max_seqlen_k (-1)"}},
      {"SoftmaxScaleNaN",
       problem([](flamia_problem& p) { p.softmax_scale = kNaN; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.softmax_scale"}},
      {"SoftmaxScaleInf",
       problem([](flamia_problem& p) { p.softmax_scale = kInf; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.softmax_scale"}},
      {"SoftmaxScaleZero",
       problem([](flamia_problem& p) { p.softmax_scale = 0.0f; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.softmax_scale"}},
      {"SoftmaxScaleNegative",
       problem([](flamia_problem& p) { p.softmax_scale = -0.125f; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.softmax_scale"}},
      {"CausalNotBoolean",
       problem([](flamia_problem& p) { p.causal = 2; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.causal (2)"}},
      {"ScaleModeInvalid",
       problem([](flamia_problem& p) { set_raw_enum(p.scale_mode, 3); }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.scale_mode (3)", "FLAMIA_SCALE_STATIC"}},
      {"StaticWithoutKeyExponents",
       problem([](flamia_problem& p) {
         p.scale_mode = FLAMIA_SCALE_STATIC;
         p.static_value_exponents = static_cast<const int8_t*>(fake_device(14));
       }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"FLAMIA_SCALE_STATIC", "problem.static_key_exponents is NULL"}},
      {"StaticWithoutValueExponents",
       problem([](flamia_problem& p) {
         p.scale_mode = FLAMIA_SCALE_STATIC;
         p.static_key_exponents = static_cast<const int8_t*>(fake_device(14));
       }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"FLAMIA_SCALE_STATIC", "problem.static_value_exponents is NULL"}},
      {"StaticExponentsWithoutStaticMode",
       problem([](flamia_problem& p) {
         p.static_value_exponents = static_cast<const int8_t*>(fake_device(14));
       }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.static_value_exponents is set", "not FLAMIA_SCALE_STATIC"}},
      {"ScaleModeNegative",
       problem([](flamia_problem& p) { set_raw_enum(p.scale_mode, -1); }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.scale_mode (-1)"}},
      {"KeySmoothingInvalid",
       problem([](flamia_problem& p) { set_raw_enum(p.key_smoothing, 3); }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.key_smoothing (3)"}},
      {"SlidingWindowNegative",
       problem([](flamia_problem& p) { p.sliding_window = -3; }),
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.sliding_window (-3)", "must not be negative"}},
      // Unsupported: valid requests flamia does not implement.
      {"SlidingWindowWithoutCausal",
       problem([](flamia_problem& p) {
         p.sliding_window = 5;
         p.causal = 0;
       }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.sliding_window (5) without causal"}},
      {"HeadDim96Unsupported",
       problem([](flamia_problem& p) { p.head_dim = 96; }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.head_dim 96 is not supported"}},
      {"HeadDim32Unsupported",
       problem([](flamia_problem& p) { p.head_dim = 32; }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.head_dim 32 is not supported"}},
      {"HeadDim100Unsupported",
       problem([](flamia_problem& p) { p.head_dim = 100; }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.head_dim 100"}},
      {"CausalTotalsDiffer",
       problem([](flamia_problem& p) { p.total_k = p.total_q + 1; }),
       FLAMIA_ERROR_UNSUPPORTED,
       {"causal", "problem.total_q (131)", "problem.total_k (132)"}},
      // The problem's pointers.
      {"CuSeqlensQNull",
       [](Setup& s) { s.args.problem.cu_seqlens_q = nullptr; },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.cu_seqlens_q is NULL"}},
      {"CuSeqlensKNull",
       [](Setup& s) { s.args.problem.cu_seqlens_k = nullptr; },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.cu_seqlens_k is NULL"}},
      {"CuSeqlensQMisaligned",
       [](Setup& s) {
         s.args.problem.cu_seqlens_q = static_cast<const int32_t*>(fake_device(0, 2));
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.cu_seqlens_q", "4-byte aligned"}},
      {"CuSeqlensKMisaligned",
       [](Setup& s) {
         s.args.problem.cu_seqlens_k = static_cast<const int32_t*>(fake_device(1, 1));
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.cu_seqlens_k", "4-byte aligned"}},
      {"CuSeqlensSliceIsFine",  // int32 alignment is enough: a slice of a cu_seqlens tensor
       [without_workspace](Setup& s) {
         s.args.problem.cu_seqlens_q = static_cast<const int32_t*>(fake_device(0, 4));
         without_workspace(s);
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"HostCuSeqlensMisaligned",
       [](Setup& s) {
         s.args.problem.host_cu_seqlens_k = reinterpret_cast<const int32_t*>(
             reinterpret_cast<const char*>(s.host_cu_k.data()) + 1);
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.host_cu_seqlens_k", "aligned"}},
      {"SmoothVectorWithoutVector",
       [](Setup& s) { s.args.problem.key_smoothing = FLAMIA_SMOOTH_VECTOR; },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"FLAMIA_SMOOTH_VECTOR", "problem.key_smoothing_vector is NULL"}},
      {"VectorWithoutSmoothVector",
       [](Setup& s) {
         s.args.problem.key_smoothing = FLAMIA_SMOOTH_FIRST_KEY;
         s.args.problem.key_smoothing_vector = static_cast<const float*>(fake_device(13));
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.key_smoothing_vector is set"}},
      {"VectorMisaligned",
       [](Setup& s) {
         s.args.problem.key_smoothing = FLAMIA_SMOOTH_VECTOR;
         s.args.problem.key_smoothing_vector = static_cast<const float*>(fake_device(13, 4));
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {"problem.key_smoothing_vector", "16-byte aligned"}},
      // The workspace.
      {"WorkspaceNull",
       without_workspace,
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL", "_workspace_size"}},
      {"WorkspaceMisaligned",
       [](Setup& s) { s.args.workspace = fake_device(12, 128); },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace", "256-byte aligned"}},
      {"WorkspaceTooSmall",
       [](Setup& s) { s.args.workspace_bytes -= 1; },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace_bytes", "too small"}},
      {"WorkspaceZeroBytes",
       [](Setup& s) { s.args.workspace_bytes = 0; },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace_bytes (0)"}},
      // The saved operands and the workspace are both written (or the workspace written while
      // the saved operands are read): one buffer for both would clobber the copies.
      {"SavedOperandsOverlapWorkspace",
       [](Setup& s) {
         s.use_saved_operands();
         s.args.saved_operands = static_cast<char*>(s.args.workspace) + 256;
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": saved_operands", "overlaps the workspace"}},
      {"SavedOperandsRightAfterWorkspaceAreFine",
       [](Setup& s) {
         s.use_saved_operands();
         s.args.saved_operands = static_cast<char*>(s.args.workspace) + s.args.workspace_bytes;
         s.args.workspace_bytes -= 1;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"too small"}},
      // Host cu_seqlens contents (same rules as the device check).
      {"HostSeqlensNotStartingAtZero",
       [](Setup& s) {
         s.host_cu_q[0] = 1;
         s.use_host_seqlens();
       },
       FLAMIA_ERROR_INVALID_SEQLENS,
       {"problem.host_cu_seqlens_q[0] is 1"}},
      {"HostSeqlensDecreasing",
       [](Setup& s) {
         s.host_cu_k[2] = 0;  // 0, 1, 0, 18, 131
         s.use_host_seqlens();
       },
       FLAMIA_ERROR_INVALID_SEQLENS,
       {"problem.host_cu_seqlens_k decreases at document 1", "[2] = 0 <", "[1] = 1"}},
      {"HostSeqlensTotalMismatch",
       [](Setup& s) {
         s.host_cu_q.back() = 130;
         s.use_host_seqlens();
       },
       FLAMIA_ERROR_INVALID_SEQLENS,
       {"problem.host_cu_seqlens_q[4] = 130", "problem.total_q (131)"}},
      {"HostSeqlensAboveMax",
       [](Setup& s) {
         s.args.problem.max_seqlen_k = 112;
         s.use_host_seqlens();
       },
       FLAMIA_ERROR_INVALID_SEQLENS,
       {"document 3 of problem.host_cu_seqlens_k has length 113", "problem.max_seqlen_k (112)"}},
      {"HostSeqlensCausalMismatch",
       [](Setup& s) {
         s.host_cu_k = {0, 2, 18, 18, 131};  // documents 0 and 1: 1 vs 2 and 17 vs 16
         s.use_host_seqlens();
       },
       FLAMIA_ERROR_INVALID_SEQLENS,
       {"causal document 0 has 1 queries", "but 2 keys"}},
      {"HostSeqlensOnlyQGiven",
       [](Setup& s) {
         s.host_cu_q[1] = 200;  // document 0 longer than max, and document 1 decreasing
         s.args.problem.host_cu_seqlens_q = s.host_cu_q.data();
       },
       FLAMIA_ERROR_INVALID_SEQLENS,
       // The most basic violation is named first: a decrease before a length above max.
       {"problem.host_cu_seqlens_q decreases at document 1"}},
      {"HostSeqlensNonCausalLengthsMayDiffer",
       [without_workspace](Setup& s) {
         s.args.problem.causal = 0;
         s.host_cu_k = {0, 2, 18, 18, 131};
         s.use_host_seqlens();
         without_workspace(s);
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
  };
  return cases;
}

// ---- tensor cases, for every tensor of a pass ------------------------------------------------

template <typename Setup>
std::vector<Case<Setup>> tensor_cases(const std::vector<std::string>& names,
                                      const std::vector<std::string>& outputs) {
  using C = Case<Setup>;
  std::vector<C> cases;
  for (const std::string& name : names) {
    const std::string field = ": " + name + ".";
    auto tensor = [name](auto change) {
      return [name, change](Setup& s) { change(s.tensor(name)); };
    };
    cases.push_back({name + "DataNull",
                     tensor([](flamia_tensor& t) { t.data = nullptr; }),
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field + "data is NULL"}});
    cases.push_back({name + "DataMisaligned",
                     tensor([](flamia_tensor& t) { t.data = static_cast<char*>(t.data) + 8; }),
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field + "data", "16-byte aligned"}});
    cases.push_back({name + "TokenStrideNotMultipleOf16Bytes",
                     tensor([](flamia_tensor& t) { t.token_stride += 4; }),
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field + "token_stride", "multiple of 8"}});
    cases.push_back({name + "HeadStrideNotMultipleOf16Bytes",
                     tensor([](flamia_tensor& t) { t.head_stride += 1; }),
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field + "head_stride", "multiple of 8"}});
    cases.push_back({name + "TokenStrideZero",
                     tensor([](flamia_tensor& t) { t.token_stride = 0; }),
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field + "token_stride (0)", "positive"}});
    cases.push_back({name + "HeadStrideNegative",
                     tensor([](flamia_tensor& t) { t.head_stride = -128; }),
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field + "head_stride (-128)", "positive"}});
    // 130 token steps of 2^60 elements pass the 64-bit address space: the kernels' offsets
    // would wrap.
    cases.push_back({name + "StridesBeyondAddressSpace",
                     tensor([](flamia_tensor& t) { t.token_stride = int64_t(1) << 60; }),
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field + "token_stride (1152921504606846976)", "address space"}});
    // A (heads, tokens, head_dim) layout is fine for every tensor.
    cases.push_back({name + "HeadMajorLayoutIsFine",
                     [name](Setup& s) {
                       flamia_tensor& t = s.tensor(name);
                       const bool q_side =
                           name == "q" || name == "o" || name == "d_o" || name == "dq";
                       const flamia_problem& p = s.args.problem;
                       t.token_stride = p.head_dim;
                       t.head_stride = int64_t(q_side ? p.total_q : p.total_k) * p.head_dim;
                       s.args.workspace = nullptr;
                     },
                     FLAMIA_ERROR_WORKSPACE,
                     {"workspace is NULL"}});
  }
  for (const std::string& name : outputs) {
    const std::string field = ": " + name + " rows overlap";
    cases.push_back({name + "HeadsOverlap",
                     [name](Setup& s) { s.tensor(name).head_stride = s.args.problem.head_dim / 2; },
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field, "must not alias itself"}});
    cases.push_back({name + "TokensOverlapHeads",
                     [name](Setup& s) { s.tensor(name).token_stride = s.args.problem.head_dim; },
                     FLAMIA_ERROR_INVALID_ARGUMENT,
                     {field}});
  }
  return cases;
}

// ---- forward -----------------------------------------------------------------------------------

std::vector<ForwardCase> forward_cases() {
  std::vector<ForwardCase> cases = problem_cases<ForwardSetup>();
  const std::vector<ForwardCase> tensors = tensor_cases<ForwardSetup>({"q", "k", "v", "o"}, {"o"});
  cases.insert(cases.end(), tensors.begin(), tensors.end());
  const std::vector<ForwardCase> specific = {
      {"LseNull",
       [](ForwardSetup& s) { s.args.lse = nullptr; },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": lse is NULL"}},
      {"LseMisaligned",
       [](ForwardSetup& s) { s.args.lse = static_cast<float*>(fake_device(6, 4)); },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": lse", "16-byte aligned"}},
      {"SoftmaxStatsMisaligned",
       [](ForwardSetup& s) { s.args.softmax_stats = static_cast<float*>(fake_device(7, 8)); },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": softmax_stats", "16-byte aligned"}},
      {"KvAmaxMisaligned",
       [](ForwardSetup& s) { s.args.kv_amax = static_cast<float*>(fake_device(14, 4)); },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": kv_amax", "16-byte aligned"}},
      {"KvAmaxWithFusedQuantization",
       [](ForwardSetup& s) {
         s.args.kv_amax = static_cast<float*>(fake_device(14));
         s.args.quantize = FLAMIA_QUANTIZE_FUSED;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {"FLAMIA_QUANTIZE_FUSED with kv_amax"}},
      {"KvAmaxIsAccepted",
       [](ForwardSetup& s) {
         s.args.kv_amax = static_cast<float*>(fake_device(14));
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"SoftmaxStatsAreOptional",
       [](ForwardSetup& s) {
         s.args.softmax_stats = nullptr;
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"InputsMayAliasThemselves",  // a broadcast-like input: heads share rows
       [](ForwardSetup& s) {
         s.args.k.head_stride = 8;
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"EmptyKeysMayBeNull",  // total_k = 0 (non-causal): k and v are never read
       [](ForwardSetup& s) {
         s.args.problem.causal = 0;
         s.args.problem.total_k = 0;
         s.args.k.data = nullptr;
         s.args.v.data = nullptr;
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"SavedOperandsMisaligned",
       [](ForwardSetup& s) {
         s.use_saved_operands();
         s.args.saved_operands = fake_device(13, 128);
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": saved_operands", "256-byte aligned"}},
      {"SavedOperandsTooSmall",
       [](ForwardSetup& s) {
         s.use_saved_operands();
         s.args.saved_operands_bytes -= 1;
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": saved_operands_bytes", "flamia_saved_operands_size"}},
      {"SavedOperandsWithFusedQuantize",
       [](ForwardSetup& s) {
         s.use_saved_operands();
         s.args.quantize = FLAMIA_QUANTIZE_FUSED;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {": saved_operands with quantize = FLAMIA_QUANTIZE_FUSED"}},
      {"FusedQuantizeWithSlidingWindow",
       [](ForwardSetup& s) {
         s.args.problem.sliding_window = 8;
         s.args.quantize = FLAMIA_QUANTIZE_FUSED;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {"FLAMIA_QUANTIZE_FUSED with a sliding window"}},
      {"FusedQuantizeWithStaticScales",
       [](ForwardSetup& s) {
         s.args.problem.scale_mode = FLAMIA_SCALE_STATIC;
         s.args.problem.static_key_exponents = static_cast<const int8_t*>(fake_device(14));
         s.args.problem.static_value_exponents = static_cast<const int8_t*>(fake_device(15));
         s.args.quantize = FLAMIA_QUANTIZE_FUSED;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {"FLAMIA_QUANTIZE_FUSED with FLAMIA_SCALE_STATIC"}},
      {"SavedOperandsAreValid",
       [](ForwardSetup& s) {
         s.use_saved_operands();
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"FusedQuantizeWithUnsupportedHeadDim",  // names the head dim: AUTO would not help
       [](ForwardSetup& s) {
         s.args.problem.head_dim = 96;
         s.relayout();
         s.args.quantize = FLAMIA_QUANTIZE_FUSED;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.head_dim 96 is not supported: the forward kernels implement head dims"}},
      {"HeadDim256",  // unsupported unless the kernels say otherwise; then the workspace fails
       [](ForwardSetup& s) {
         s.args.problem.head_dim = 256;
         s.relayout();
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.head_dim 256 is not supported yet"}},
  };
  cases.insert(cases.end(), specific.begin(), specific.end());
  return cases;
}

class ForwardValidation : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardValidation, ReturnsStatusNamingTheArgument) {
  const ForwardCase& c = GetParam();
  // Skip only where the kernels themselves implement head dim 256: asking the API instead would
  // turn a validation that wrongly lets 256 through (status WORKSPACE) into a skip.
  if (c.name == "HeadDim256" && flamia::forward_supports_head_dim(256))
    GTEST_SKIP() << "the forward kernels support hdim 256";
  expect_case(c, "flamia_forward", [](const flamia_forward_args* a) { return flamia_forward(a); });
}

INSTANTIATE_TEST_SUITE_P(Api, ForwardValidation, ::testing::ValuesIn(forward_cases()),
                         case_name<ForwardSetup>);

// ---- backward ----------------------------------------------------------------------------------

std::vector<BackwardCase> backward_cases() {
  std::vector<BackwardCase> cases = problem_cases<BackwardSetup>();
  const std::vector<BackwardCase> tensors = tensor_cases<BackwardSetup>(
      {"q", "k", "v", "o", "d_o", "dq", "dk", "dv"}, {"dq", "dk", "dv"});
  cases.insert(cases.end(), tensors.begin(), tensors.end());
  const std::vector<BackwardCase> specific = {
      // One document of 2M keys among 300,000: document x key tiles per document passes 2^31
      // (the forward has no such limit).
      {"LaunchOrderBeyond32Bits",
       [](BackwardSetup& s) {
         s.args.problem.batch = 300000;
         s.args.problem.total_q = s.args.problem.total_k = 2000000;
         s.args.problem.max_seqlen_q = s.args.problem.max_seqlen_k = 2000000;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {"the backward cannot launch this problem (batch 300000, max_seqlen_k 2000000",
        "launch-order entries", "split the batch"}},
      {"PrecisionInvalid",
       [](BackwardSetup& s) { set_raw_enum(s.args.precision, 5); },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": precision (5)"}},
      {"DeterministicNotBoolean",
       [](BackwardSetup& s) { s.args.deterministic = -1; },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": deterministic (-1)"}},
      {"SoftmaxStatsMissing",
       [](BackwardSetup& s) { s.args.softmax_stats = nullptr; },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": softmax_stats is NULL", "flamia_forward"}},
      {"SoftmaxStatsMisaligned",
       [](BackwardSetup& s) {
         s.args.softmax_stats = static_cast<const float*>(fake_device(8, 4));
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": softmax_stats", "16-byte aligned"}},
      {"LseIsNotRead",
       [](BackwardSetup& s) {
         s.args.lse = nullptr;
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"DeterministicWorkspaceTooSmall",
       [](BackwardSetup& s) {
         s.args.deterministic = 1;
         size_t bytes = 0;
         ASSERT_EQ(flamia_backward_workspace_size(&s.args, &bytes), FLAMIA_OK);
         s.args.workspace_bytes = bytes - 1;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"too small"}},
      {"SavedOperandsMisaligned",
       [](BackwardSetup& s) {
         s.use_saved_operands();
         s.args.saved_operands = fake_device(13, 16);
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": saved_operands", "256-byte aligned"}},
      {"SavedOperandsTooSmall",
       [](BackwardSetup& s) {
         s.use_saved_operands();
         s.args.saved_operands_bytes = 256;
       },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": saved_operands_bytes (256)", "flamia_saved_operands_size"}},
      {"SavedOperandsWithBf16Grad",
       [](BackwardSetup& s) {
         s.args.precision = FLAMIA_PRECISION_FP8_BF16GRAD;
         s.use_saved_operands();
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {": saved_operands with precision FLAMIA_PRECISION_FP8_BF16GRAD"}},
      {"SavedOperandsLeaveQkvUnread",  // q, k, v may be NULL then
       [](BackwardSetup& s) {
         s.use_saved_operands();
         s.args.q.data = s.args.k.data = s.args.v.data = nullptr;
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_WORKSPACE,
       {"workspace is NULL"}},
      {"QkvAreReadWithoutSavedOperands",
       [](BackwardSetup& s) { s.args.k.data = nullptr; },
       FLAMIA_ERROR_INVALID_ARGUMENT,
       {": k.data is NULL"}},
      {"HeadDim256",
       [](BackwardSetup& s) {
         s.args.problem.head_dim = 256;
         s.relayout();
         s.args.workspace = nullptr;
       },
       FLAMIA_ERROR_UNSUPPORTED,
       {"problem.head_dim 256 is not supported yet", "backward"}},
  };
  cases.insert(cases.end(), specific.begin(), specific.end());
  return cases;
}

class BackwardValidation : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardValidation, ReturnsStatusNamingTheArgument) {
  const BackwardCase& c = GetParam();
  if (c.name == "HeadDim256" && flamia::backward_supports_head_dim(256))  // as the forward's
    GTEST_SKIP() << "the backward kernels support hdim 256";
  expect_case(c, "flamia_backward",
              [](const flamia_backward_args* a) { return flamia_backward(a); });
}

INSTANTIATE_TEST_SUITE_P(Api, BackwardValidation, ::testing::ValuesIn(backward_cases()),
                         case_name<BackwardSetup>);

// ---- FLAMIA_FORWARD_OVERLAP
// ----------------------------------------------------------------------

// A bad value is an argument error of every forward call, before the device is touched; a good
// one passes validation (the device check stops it without a GPU).
TEST(ApiValidation, ForwardOverlapSettingIsValidated) {
  for (const char* bad :
       {"on", "0:4", "9:4", "2:0", "2:4x", "2", ":4", "-1:3", "2:4:0", "2:4:3", "2:4:", "2:4:1x"}) {
    setenv("FLAMIA_FORWARD_OVERLAP", bad, 1);
    ForwardSetup setup;
    reset_message();
    EXPECT_EQ(flamia_forward(&setup.args), FLAMIA_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_forward: FLAMIA_FORWARD_OVERLAP"))
        << flamia_last_error_message();
    EXPECT_TRUE(contains(flamia_last_error_message(), bad)) << flamia_last_error_message();
  }
  if (!sm90_device_present()) {
    for (const char* good : {"off", "auto", "", "1:1", "8:132", "4:16", "4:16:1", "2:8:2"}) {
      setenv("FLAMIA_FORWARD_OVERLAP", good, 1);
      ForwardSetup setup;
      EXPECT_EQ(flamia_forward(&setup.args), FLAMIA_ERROR_NO_DEVICE)
          << good << ": " << flamia_last_error_message();
    }
  }
  unsetenv("FLAMIA_FORWARD_OVERLAP");
}

// ---- null arguments, empty problems, the device requirement -----------------------------------

TEST(ApiValidation, NullArgs) {
  EXPECT_EQ(flamia_forward(nullptr), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_forward: args is NULL"));
  EXPECT_EQ(flamia_backward(nullptr), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_backward: args is NULL"));
}

// total_q = total_k = 0 is a valid empty problem: it succeeds and touches nothing, so empty
// tensors may be NULL and no device is needed.
TEST(ApiValidation, EmptyProblemSucceedsWithoutTouchingTheDevice) {
  ForwardSetup forward;
  forward.args.problem.total_q = 0;
  forward.args.problem.total_k = 0;
  forward.host_cu_q = {0, 0, 0, 0, 0};
  forward.host_cu_k = {0, 0, 0, 0, 0};
  forward.use_host_seqlens();
  forward.relayout();
  forward.args.q.data = forward.args.k.data = forward.args.v.data = forward.args.o.data = nullptr;
  forward.args.lse = nullptr;
  forward.args.softmax_stats = nullptr;
  EXPECT_EQ(flamia_forward(&forward.args), FLAMIA_OK) << flamia_last_error_message();

  BackwardSetup backward;
  backward.args.problem.total_q = 0;
  backward.args.problem.total_k = 0;
  backward.relayout();
  for (flamia_tensor* t :
       {&backward.args.q, &backward.args.k, &backward.args.v, &backward.args.o, &backward.args.d_o,
        &backward.args.dq, &backward.args.dk, &backward.args.dv}) {
    t->data = nullptr;
  }
  backward.args.softmax_stats = nullptr;
  EXPECT_EQ(flamia_backward(&backward.args), FLAMIA_OK) << flamia_last_error_message();
}

// kv_amax is an output of the keys alone (0 without keys): a forward without queries but with
// kv_amax has something to write, so it does not return early (without a GPU it stops at the
// device check instead of succeeding with kv_amax unwritten).
TEST(ApiValidation, ForwardWithoutQueriesAndKvAmax) {
  if (sm90_device_present()) GTEST_SKIP() << "an sm_90 GPU is present (GPU tests cover it)";
  ForwardSetup no_queries;
  no_queries.args.problem.causal = 0;
  no_queries.args.problem.total_q = 0;
  no_queries.relayout();
  EXPECT_EQ(flamia_forward(&no_queries.args), FLAMIA_OK) << flamia_last_error_message();
  no_queries.args.kv_amax = static_cast<float*>(fake_device(14));
  EXPECT_EQ(flamia_forward(&no_queries.args), FLAMIA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::strstr(flamia_last_error_message(), "kv_amax"), nullptr)
      << flamia_last_error_message();

  ForwardSetup empty;
  empty.args.problem.total_q = 0;
  empty.args.problem.total_k = 0;
  empty.relayout();
  empty.args.kv_amax = static_cast<float*>(fake_device(14));
  EXPECT_EQ(flamia_forward(&empty.args), FLAMIA_ERROR_NO_DEVICE) << flamia_last_error_message();
}

TEST(ApiValidation, EmptyProblemIsStillValidated) {
  ForwardSetup setup;
  setup.args.problem.total_q = 0;
  setup.args.problem.total_k = 0;
  setup.relayout();
  setup.args.workspace = nullptr;
  EXPECT_EQ(flamia_forward(&setup.args), FLAMIA_ERROR_WORKSPACE);
  setup.relayout();
  setup.host_cu_q = {0, 0, 1, 0, 0};
  setup.use_host_seqlens();
  EXPECT_EQ(flamia_forward(&setup.args), FLAMIA_ERROR_INVALID_SEQLENS);
}

// The valid baseline of every case above gets through validation: without an sm_90 GPU it
// stops at the device check (with one, it would run kernels on fake pointers: skip).
TEST(ApiValidation, ValidArgumentsReachTheDeviceCheckWithoutGpu) {
  if (sm90_device_present()) GTEST_SKIP() << "an sm_90 GPU is present (GPU tests cover it)";
  ForwardSetup forward;
  forward.use_host_seqlens();
  EXPECT_EQ(flamia_forward(&forward.args), FLAMIA_ERROR_NO_DEVICE) << flamia_last_error_message();
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_forward: "));
  EXPECT_TRUE(contains(flamia_last_error_message(), "sm_90"));

  BackwardSetup backward;
  backward.use_host_seqlens();
  EXPECT_EQ(flamia_backward(&backward.args), FLAMIA_ERROR_NO_DEVICE) << flamia_last_error_message();
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_backward: "));

  ForwardSetup saving;
  saving.use_saved_operands();
  EXPECT_EQ(flamia_forward(&saving.args), FLAMIA_ERROR_NO_DEVICE) << flamia_last_error_message();
  BackwardSetup from_saved;
  from_saved.use_saved_operands();
  from_saved.args.q.data = from_saved.args.k.data = from_saved.args.v.data = nullptr;
  EXPECT_EQ(flamia_backward(&from_saved.args), FLAMIA_ERROR_NO_DEVICE)
      << flamia_last_error_message();

  // Problems with one empty side still run (their outputs are defined), so need the device.
  BackwardSetup no_queries;
  no_queries.args.problem.causal = 0;
  no_queries.args.problem.total_q = 0;
  no_queries.relayout();
  EXPECT_EQ(flamia_backward(&no_queries.args), FLAMIA_ERROR_NO_DEVICE)
      << flamia_last_error_message();
}

}  // namespace
}  // namespace flamia_test
