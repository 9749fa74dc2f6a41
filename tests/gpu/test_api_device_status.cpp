// The device-side cu_seqlens guard of the C API, on an sm_90 GPU: contents that only the device
// sees (not starting at 0, decreasing, total mismatch, a document above max_seqlen, causal
// length mismatch) leave NaN in every output and make flamia_check_device_status report
// FLAMIA_ERROR_INVALID_SEQLENS; the status is cleared, stale workspace contents never count, and
// a good call afterwards works. Also: the guard inside a captured CUDA graph, the outputs of
// problems with no keys or no queries (written by the API without the attention kernels), and an
// Inf in q, k, v or dO (numerics §7: every output NaN, flamia_check_device_status names the
// tensor).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flamia/flamia.h"
#include "gpu/gpu_test_utils.h"

namespace flamia::test {
namespace {

// Awkward documents: lengths 1, 17, 0 (empty), 113.
const std::vector<int32_t> kGoodCuSeqlens = {0, 1, 18, 18, 131};
constexpr int32_t kBatch = 4;
constexpr int32_t kTotal = 131;
constexpr int32_t kMaxSeqlen = 113;
constexpr int32_t kHeadsQ = 4;
constexpr int32_t kHeadsKv = 2;
constexpr int32_t kHeadDim = 128;
// Outputs get 8 padding elements per token, which no call may write.
constexpr int64_t kRowPadding = 8;
constexpr uint16_t kPaddingSentinel = 0x1234;
constexpr uint8_t kNaNBytes = 0xFF;  // every BF16 / FP32 made of these bytes is a NaN
constexpr int kStatsPerRow = 2;

uint16_t to_bf16(float x) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
bool bf16_is_nan(uint16_t bits) {
  return (bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu) != 0;
}
bool bf16_is_finite(uint16_t bits) {
  return (bits & 0x7F80u) != 0x7F80u;
}

// A BF16 (tokens, heads, head_dim) tensor in a padded token-major buffer.
struct Tensor {
  int tokens = 0;
  int heads = 0;
  int64_t token_stride = 0;
  DeviceBuffer<uint16_t> buffer;

  Tensor(int tokens_, int heads_, int64_t padding)
      : tokens(tokens_),
        heads(heads_),
        token_stride(int64_t(heads_) * kHeadDim + padding),
        buffer(size_t(std::max(tokens_, 1)) * size_t(token_stride)) {}
  flamia_tensor view() const { return {buffer.get(), token_stride, kHeadDim}; }
  bool is_element(size_t index) const { return int64_t(index % token_stride) < heads * kHeadDim; }
  void fill(uint16_t element, uint16_t padding = kPaddingSentinel) {
    std::vector<uint16_t> host(buffer.size());
    for (size_t i = 0; i < host.size(); ++i) host[i] = is_element(i) ? element : padding;
    buffer.upload(host);
  }
  void fill_random(std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> host(buffer.size(), kPaddingSentinel);
    for (size_t i = 0; i < host.size(); ++i) {
      if (is_element(i)) host[i] = to_bf16(normal(rng));
    }
    buffer.upload(host);
  }
  // Counts elements that fail `ok` among the first `used_tokens` tokens; padding must hold the
  // sentinel.
  template <typename Predicate>
  void expect_all(Predicate ok, const std::string& what, int used_tokens) const {
    const std::vector<uint16_t> host = buffer.download();
    size_t bad = 0;
    size_t padding_written = 0;
    for (size_t i = 0; i < size_t(used_tokens) * size_t(token_stride); ++i) {
      if (!is_element(i)) {
        padding_written += host[i] != kPaddingSentinel;
      } else {
        bad += !ok(host[i]);
      }
    }
    EXPECT_EQ(bad, 0u) << what;
    EXPECT_EQ(padding_written, 0u) << what << ": padding between tokens was written";
  }
};

template <typename Predicate>
void expect_all_floats(const DeviceBuffer<float>& buffer, size_t count, Predicate ok,
                       const std::string& what) {
  const std::vector<float> host = buffer.download();
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) bad += !ok(host[i]);
  EXPECT_EQ(bad, 0u) << what;
}

bool is_nan(float x) {
  return std::isnan(x);
}
bool is_finite(float x) {
  return std::isfinite(x);
}

// Contents that pass every host-side check (the host never sees them) but break a rule.
struct BadSeqlens {
  std::string name;
  std::vector<int32_t> cu_q;
  std::vector<int32_t> cu_k;
  int32_t max_seqlen;
  std::string message;  // must appear in flamia_check_device_status's message
};

std::vector<BadSeqlens> bad_seqlens_cases() {
  return {
      {"NotStartingAtZero",
       {1, 1, 18, 18, 131},
       kGoodCuSeqlens,
       kMaxSeqlen,
       "problem.cu_seqlens_q[0] is 1"},
      {"Decreasing",
       kGoodCuSeqlens,
       {0, 1, 0, 18, 131},
       kMaxSeqlen,
       "problem.cu_seqlens_k decreases at document 1"},
      {"TotalMismatch",
       {0, 1, 18, 18, 130},
       {0, 1, 18, 18, 130},
       kMaxSeqlen,
       "problem.cu_seqlens_q[4] = 130 must equal problem.total_q (131)"},
      {"AboveMaxSeqlen", kGoodCuSeqlens, kGoodCuSeqlens, kMaxSeqlen - 1,
       "document 3 of problem.cu_seqlens_q has length 113, above problem.max_seqlen_q (112)"},
      {"CausalLengthMismatch",
       kGoodCuSeqlens,
       {0, 2, 18, 18, 131},
       kMaxSeqlen,
       "causal document 0 has 1 queries"},
  };
}

class ApiDeviceStatus : public ::testing::Test {
 protected:
  void SetUp() override {
    FLAMIA_REQUIRE_SM90();
    // A blocking stream: the helpers' synchronous copies on the legacy stream order with it.
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    rng_.seed(uint32_t(case_seed(::testing::UnitTest::GetInstance()->current_test_info()->name())));
    q_.fill_random(rng_);
    k_.fill_random(rng_);
    v_.fill_random(rng_);
    d_o_.fill_random(rng_);
    upload_seqlens(kGoodCuSeqlens, kGoodCuSeqlens);

    size_t forward_bytes = 0;
    size_t backward_bytes = 0;
    ASSERT_EQ(flamia_forward_workspace_size(&forward_args_unchecked(), &forward_bytes), FLAMIA_OK)
        << flamia_last_error_message();
    ASSERT_EQ(flamia_backward_workspace_size(&backward_args_unchecked(), &backward_bytes),
              FLAMIA_OK)
        << flamia_last_error_message();
    workspace_bytes_ = std::max(forward_bytes, backward_bytes);
    workspace_ = DeviceBuffer<uint8_t>(workspace_bytes_);
    ASSERT_NE(workspace_.get(), nullptr);
    workspace_.poison(kNaNBytes);  // stale contents must never count as a status
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  void upload_seqlens(const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k) {
    cu_q_.upload(cu_q);
    cu_k_.upload(cu_k);
  }

  flamia_problem problem() const {
    flamia_problem p{};
    p.cu_seqlens_q = cu_q_.get();
    p.cu_seqlens_k = cu_k_.get();
    p.batch = kBatch;
    p.total_q = kTotal;
    p.total_k = kTotal;
    p.heads_q = kHeadsQ;
    p.heads_kv = kHeadsKv;
    p.head_dim = kHeadDim;
    p.max_seqlen_q = max_seqlen_;
    p.max_seqlen_k = max_seqlen_;
    p.softmax_scale = 1.0f / std::sqrt(float(kHeadDim));
    p.causal = 1;
    p.scale_mode = scale_mode_;
    p.key_smoothing = FLAMIA_SMOOTH_NONE;
    if (scale_mode_ == FLAMIA_SCALE_STATIC) {
      p.static_key_exponents = static_exponents_.get();
      p.static_value_exponents = static_exponents_.get();
    }
    return p;
  }

  flamia_forward_args& forward_args_unchecked() {
    forward_ = flamia_forward_args{};
    forward_.problem = problem();
    forward_.q = q_.view();
    forward_.k = k_.view();
    forward_.v = v_.view();
    forward_.o = o_.view();
    forward_.lse = lse_.get();
    forward_.softmax_stats = stats_.get();
    forward_.workspace = workspace_.get();
    forward_.workspace_bytes = workspace_bytes_;
    forward_.stream = stream_;
    return forward_;
  }
  flamia_backward_args& backward_args_unchecked() {
    backward_ = flamia_backward_args{};
    backward_.problem = problem();
    backward_.q = q_.view();
    backward_.k = k_.view();
    backward_.v = v_.view();
    backward_.o = o_.view();
    backward_.d_o = d_o_.view();
    backward_.lse = lse_.get();
    backward_.softmax_stats = stats_.get();
    backward_.dq = dq_.view();
    backward_.dk = dk_.view();
    backward_.dv = dv_.view();
    backward_.precision = FLAMIA_PRECISION_FP8;
    backward_.workspace = workspace_.get();
    backward_.workspace_bytes = workspace_bytes_;
    backward_.stream = stream_;
    return backward_;
  }

  flamia_status run_forward() { return flamia_forward(&forward_args_unchecked()); }
  flamia_status run_backward() { return flamia_backward(&backward_args_unchecked()); }
  flamia_status check_status() { return flamia_check_device_status(workspace_.get(), stream_); }

  // Outputs set to values the call must replace: zeros when NaN is expected, NaN otherwise.
  void prefill_forward_outputs(bool expect_nan) {
    o_.fill(expect_nan ? uint16_t(0) : uint16_t(0xFFFF));
    const std::vector<float> floats(stats_.size(), expect_nan ? 0.0f : NAN);
    lse_.upload(std::vector<float>(floats.begin(), floats.begin() + lse_.size()));
    stats_.upload(floats);
  }
  void prefill_backward_outputs(bool expect_nan) {
    for (Tensor* t : {&dq_, &dk_, &dv_}) t->fill(expect_nan ? uint16_t(0) : uint16_t(0xFFFF));
  }

  void expect_forward_outputs(bool (*bf16_ok)(uint16_t), bool (*float_ok)(float),
                              const std::string& what) {
    o_.expect_all(bf16_ok, what + ": O", kTotal);
    expect_all_floats(lse_, lse_.size(), float_ok, what + ": LSE");
    expect_all_floats(stats_, stats_.size(), float_ok, what + ": softmax stats");
  }
  void expect_backward_outputs(bool (*bf16_ok)(uint16_t), const std::string& what) {
    dq_.expect_all(bf16_ok, what + ": dQ", kTotal);
    dk_.expect_all(bf16_ok, what + ": dK", kTotal);
    dv_.expect_all(bf16_ok, what + ": dV", kTotal);
  }

  // A good forward (and its status check) after whatever came before.
  void expect_good_forward(const std::string& what) {
    upload_seqlens(kGoodCuSeqlens, kGoodCuSeqlens);
    max_seqlen_ = kMaxSeqlen;
    prefill_forward_outputs(false);
    ASSERT_EQ(run_forward(), FLAMIA_OK) << flamia_last_error_message();
    ASSERT_EQ(check_status(), FLAMIA_OK) << flamia_last_error_message();
    expect_forward_outputs(bf16_is_finite, is_finite, what);
  }

  cudaStream_t stream_ = nullptr;
  std::mt19937 rng_;
  int32_t max_seqlen_ = kMaxSeqlen;
  flamia_scale_mode scale_mode_ = FLAMIA_SCALE_EXACT;
  // FLAMIA_SCALE_STATIC's K and V exponents: N(0, 1) inputs stay far below 448 * 2^-5.
  DeviceBuffer<int8_t> static_exponents_{std::vector<int8_t>(kHeadsKv, int8_t(-5))};
  DeviceBuffer<int32_t> cu_q_{size_t(kBatch + 1)};
  DeviceBuffer<int32_t> cu_k_{size_t(kBatch + 1)};
  Tensor q_{kTotal, kHeadsQ, 0};
  Tensor k_{kTotal, kHeadsKv, 0};
  Tensor v_{kTotal, kHeadsKv, 0};
  Tensor o_{kTotal, kHeadsQ, kRowPadding};
  Tensor d_o_{kTotal, kHeadsQ, 0};
  Tensor dq_{kTotal, kHeadsQ, kRowPadding};
  Tensor dk_{kTotal, kHeadsKv, kRowPadding};
  Tensor dv_{kTotal, kHeadsKv, kRowPadding};
  DeviceBuffer<float> lse_{size_t(kHeadsQ) * kTotal};
  DeviceBuffer<float> stats_{size_t(kHeadsQ) * kTotal * kStatsPerRow};
  DeviceBuffer<uint8_t> workspace_;
  size_t workspace_bytes_ = 0;
  flamia_forward_args forward_{};
  flamia_backward_args backward_{};
};

class ApiBadDeviceSeqlens : public ApiDeviceStatus,
                            public ::testing::WithParamInterface<BadSeqlens> {
 protected:
  void upload_bad() {
    const BadSeqlens& bad = GetParam();
    upload_seqlens(bad.cu_q, bad.cu_k);
    max_seqlen_ = bad.max_seqlen;
  }
  void expect_reported_once() {
    EXPECT_EQ(check_status(), FLAMIA_ERROR_INVALID_SEQLENS) << flamia_last_error_message();
    const std::string message = flamia_last_error_message();
    EXPECT_NE(message.find("flamia_check_device_status: "), std::string::npos) << message;
    EXPECT_NE(message.find(GetParam().message), std::string::npos) << message;
    EXPECT_EQ(check_status(), FLAMIA_OK) << "the status must be cleared once reported";
  }
};

TEST_P(ApiBadDeviceSeqlens, ForwardPoisonsOutputsAndReports) {
  upload_bad();
  prefill_forward_outputs(true);
  ASSERT_EQ(run_forward(), FLAMIA_OK) << "device-side problems are not seen at the call";
  expect_reported_once();
  expect_forward_outputs(bf16_is_nan, is_nan, "after bad cu_seqlens");
  expect_good_forward("the good forward after a bad one");
}

TEST_P(ApiBadDeviceSeqlens, BackwardPoisonsOutputsAndReports) {
  upload_bad();
  prefill_backward_outputs(true);
  ASSERT_EQ(run_backward(), FLAMIA_OK) << "device-side problems are not seen at the call";
  expect_reported_once();
  expect_backward_outputs(bf16_is_nan, "after bad cu_seqlens");

  expect_good_forward("the forward before a good backward");
  prefill_backward_outputs(false);
  ASSERT_EQ(run_backward(), FLAMIA_OK) << flamia_last_error_message();
  ASSERT_EQ(check_status(), FLAMIA_OK) << flamia_last_error_message();
  expect_backward_outputs(bf16_is_finite, "the good backward after a bad one");
}

INSTANTIATE_TEST_SUITE_P(Api, ApiBadDeviceSeqlens, ::testing::ValuesIn(bad_seqlens_cases()),
                         [](const ::testing::TestParamInfo<BadSeqlens>& info) {
                           return info.param.name;
                         });

// numerics §7: an Inf in an input (E4M3 has none; saturating it would be a finite wrong value).
struct InfiniteInput {
  std::string name;
  flamia_scale_mode scale_mode;
  char tensor;    // 'q', 'k', 'v' or 'd' (dO)
  uint16_t bits;  // BF16 +Inf or -Inf
  std::string message;
};

std::vector<InfiniteInput> infinite_input_cases() {
  constexpr uint16_t kPlusInf = 0x7F80, kMinusInf = 0xFF80;
  std::vector<InfiniteInput> cases;
  const std::pair<flamia_scale_mode, const char*> modes[] = {{FLAMIA_SCALE_EXACT, "Exact"},
                                                             {FLAMIA_SCALE_BLOCK32, "Block32"},
                                                             {FLAMIA_SCALE_STATIC, "Static"}};
  for (const auto& [mode, mode_name] : modes) {
    cases.push_back(
        {std::string(mode_name) + "Q", mode, 'q', kPlusInf, "q holds an infinite value"});
    cases.push_back(
        {std::string(mode_name) + "K", mode, 'k', kMinusInf, "k holds an infinite value"});
    cases.push_back(
        {std::string(mode_name) + "V", mode, 'v', kPlusInf, "v holds an infinite value"});
    cases.push_back(
        {std::string(mode_name) + "DO", mode, 'd', kMinusInf, "d_o holds an infinite value"});
  }
  return cases;
}

class ApiInfiniteInput : public ApiDeviceStatus,
                         public ::testing::WithParamInterface<InfiniteInput> {
 protected:
  Tensor& target() {
    switch (GetParam().tensor) {
      case 'q':
        return q_;
      case 'k':
        return k_;
      case 'v':
        return v_;
      default:
        return d_o_;
    }
  }
  // Token 60 of document 3 (a 113-token document), head 1, channel 5.
  void plant_infinity() {
    Tensor& t = target();
    std::vector<uint16_t> host = t.buffer.download();
    host[size_t(18 + 60) * size_t(t.token_stride) + 1 * kHeadDim + 5] = GetParam().bits;
    t.buffer.upload(host);
  }
  void expect_reported_once() {
    EXPECT_EQ(check_status(), FLAMIA_ERROR_INVALID_ARGUMENT) << flamia_last_error_message();
    const std::string message = flamia_last_error_message();
    EXPECT_NE(message.find(GetParam().message), std::string::npos) << message;
    EXPECT_EQ(check_status(), FLAMIA_OK) << "the status must be cleared once reported";
  }
};

TEST_P(ApiInfiniteInput, PoisonsEveryOutputAndNamesTheTensor) {
  scale_mode_ = GetParam().scale_mode;
  if (GetParam().tensor != 'd') {
    plant_infinity();
    prefill_forward_outputs(true);
    ASSERT_EQ(run_forward(), FLAMIA_OK) << flamia_last_error_message();
    expect_reported_once();
    expect_forward_outputs(bf16_is_nan, is_nan, "forward with an Inf input");
    target().fill_random(rng_);
  }
  // The backward finds it itself (it quantizes q, k, v again without saved operands, and dO):
  // a clean forward first, so that no NaN of the forward's outputs reaches it.
  expect_good_forward("the forward before the backward");
  plant_infinity();
  prefill_backward_outputs(true);
  ASSERT_EQ(run_backward(), FLAMIA_OK) << flamia_last_error_message();
  expect_reported_once();
  expect_backward_outputs(bf16_is_nan, "backward with an Inf input");

  target().fill_random(rng_);
  expect_good_forward("a good forward after an Inf input");
}

// The forward that quantizes inside the attention kernel (FLAMIA_QUANTIZE_FUSED) finds it too.
TEST_P(ApiInfiniteInput, FusedForwardPoisonsEveryOutputAndNamesTheTensor) {
  if (GetParam().tensor == 'd' || GetParam().scale_mode == FLAMIA_SCALE_STATIC)
    GTEST_SKIP() << "the fused forward reads no dO and has no static scales";
  scale_mode_ = GetParam().scale_mode;
  plant_infinity();
  prefill_forward_outputs(true);
  flamia_forward_args& fused = forward_args_unchecked();
  fused.quantize = FLAMIA_QUANTIZE_FUSED;
  ASSERT_EQ(flamia_forward(&fused), FLAMIA_OK) << flamia_last_error_message();
  expect_reported_once();
  expect_forward_outputs(bf16_is_nan, is_nan, "fused forward with an Inf input");

  target().fill_random(rng_);
  expect_good_forward("a good forward after an Inf input");
}

INSTANTIATE_TEST_SUITE_P(Api, ApiInfiniteInput, ::testing::ValuesIn(infinite_input_cases()),
                         [](const ::testing::TestParamInfo<InfiniteInput>& info) {
                           return info.param.name;
                         });

// A fresh workspace full of garbage: the first call rewrites the status record.
TEST_F(ApiDeviceStatus, StaleWorkspaceContentsDoNotCount) {
  workspace_.poison(kNaNBytes);
  expect_good_forward("a forward on a garbage workspace");
}

// The guard works inside a captured graph: it reads cu_seqlens when the graph runs.
TEST_F(ApiDeviceStatus, GuardRunsInsideACapturedGraph) {
  prefill_forward_outputs(false);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const flamia_status captured = run_forward();
  EXPECT_EQ(check_status(), FLAMIA_ERROR_INVALID_ARGUMENT) << "no synchronization while capturing";
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(captured, FLAMIA_OK) << flamia_last_error_message();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(check_status(), FLAMIA_OK) << flamia_last_error_message();
  expect_forward_outputs(bf16_is_finite, is_finite, "graph replay, good cu_seqlens");

  upload_seqlens({0, 1, 18, 17, 131}, kGoodCuSeqlens);  // decreasing at document 2
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(check_status(), FLAMIA_ERROR_INVALID_SEQLENS);
  EXPECT_NE(std::string(flamia_last_error_message()).find("decreases at document 2"),
            std::string::npos)
      << flamia_last_error_message();
  expect_forward_outputs(bf16_is_nan, is_nan, "graph replay, bad cu_seqlens");

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

bool bf16_is_zero(uint16_t bits) {
  return bits == 0;
}

// No keys (non-causal): every row sees nothing, so O = 0, LSE = -inf, stats {0, 0}.
TEST_F(ApiDeviceStatus, ForwardWithoutKeys) {
  upload_seqlens(kGoodCuSeqlens, {0, 0, 0, 0, 0});
  prefill_forward_outputs(false);
  flamia_forward_args& args = forward_args_unchecked();
  args.problem.causal = 0;
  args.problem.total_k = 0;
  ASSERT_EQ(flamia_forward(&args), FLAMIA_OK) << flamia_last_error_message();
  ASSERT_EQ(check_status(), FLAMIA_OK) << flamia_last_error_message();
  o_.expect_all(bf16_is_zero, "O without keys", kTotal);
  expect_all_floats(
      lse_, lse_.size(), [](float x) { return std::isinf(x) && x < 0; }, "LSE without keys");
  expect_all_floats(
      stats_, stats_.size(), [](float x) { return x == 0.0f; }, "stats");
}

// No queries: dK = dV = 0. No keys: dQ = 0.
TEST_F(ApiDeviceStatus, BackwardWithOneSideEmpty) {
  upload_seqlens({0, 0, 0, 0, 0}, kGoodCuSeqlens);
  prefill_backward_outputs(false);
  flamia_backward_args& no_queries = backward_args_unchecked();
  no_queries.problem.causal = 0;
  no_queries.problem.total_q = 0;
  ASSERT_EQ(flamia_backward(&no_queries), FLAMIA_OK) << flamia_last_error_message();
  ASSERT_EQ(check_status(), FLAMIA_OK) << flamia_last_error_message();
  dk_.expect_all(bf16_is_zero, "dK without queries", kTotal);
  dv_.expect_all(bf16_is_zero, "dV without queries", kTotal);

  upload_seqlens(kGoodCuSeqlens, {0, 0, 0, 0, 0});
  prefill_backward_outputs(false);
  flamia_backward_args& no_keys = backward_args_unchecked();
  no_keys.problem.causal = 0;
  no_keys.problem.total_k = 0;
  ASSERT_EQ(flamia_backward(&no_keys), FLAMIA_OK) << flamia_last_error_message();
  ASSERT_EQ(check_status(), FLAMIA_OK) << flamia_last_error_message();
  dq_.expect_all(bf16_is_zero, "dQ without keys", kTotal);
}

}  // namespace
}  // namespace flamia::test
