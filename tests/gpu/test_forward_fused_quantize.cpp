// The forward with its quantization fused into the kernel (flamia_forward_args.quantize = FUSED)
// against the separate quantize pass (SEPARATE) through the public C API: O, LSE and {M, l}
// must be equal bit for bit (the fused producer writes the bytes the pass would have written),
// on short packed documents and on long ones (key tiles that straddle documents, block32 blocks
// that straddle tiles), and both against the CPU reference. Outputs are poisoned before every
// run. AUTO takes the separate pass (measured faster); head dim 64 has no fused kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "flamia/flamia.h"
#include "gpu_test_utils.h"
#include "reference/api_problem.h"
#include "reference/attention_ref.h"

namespace flamia::test {
namespace {

struct FusedCase {
  std::string name;
  std::vector<int> docs;  // query (and, unless keys is set, key) lengths
  std::vector<int> keys;  // non-causal cross lengths; empty: the same as docs
  int heads_q;
  int heads_kv;
  int head_dim;
  bool causal;
  ScaleMode mode;
};

struct ForwardRun {
  std::vector<uint16_t> o;
  std::vector<float> lse;
  std::vector<float> stats;
};

std::vector<int32_t> offsets(const std::vector<int>& lengths) {
  std::vector<int32_t> cu = {0};
  for (int n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

class FusedForward {
 public:
  FusedForward(const ref::Problem& p, const ref::Inputs& in)
      : p_(p),
        cu_q_(p.cu_seqlens_q),
        cu_k_(p.cu_seqlens_k),
        q_(in.q.bits),
        k_(in.k.bits),
        v_(in.v.bits),
        o_(in.q.bits.size()),
        lse_(size_t(p.heads_q) * p.total_q()),
        stats_(size_t(p.heads_q) * p.total_q() * 2) {}

  flamia_forward_args args(flamia_forward_quantize quantize) const {
    flamia_forward_args a;
    std::memset(&a, 0, sizeof(a));
    a.problem = ref::api_problem(p_, cu_q_.get(), cu_k_.get());
    auto dense = [&](const DeviceBuffer<uint16_t>& b, int heads) {
      return flamia_tensor{b.get(), int64_t(heads) * p_.head_dim, p_.head_dim};
    };
    a.q = dense(q_, p_.heads_q);
    a.k = dense(k_, p_.heads_kv);
    a.v = dense(v_, p_.heads_kv);
    a.o = dense(o_, p_.heads_q);
    a.lse = lse_.get();
    a.softmax_stats = stats_.get();
    a.quantize = quantize;
    return a;
  }

  // flamia_forward's status (the workspace query's when that fails), outputs not read.
  flamia_status status(flamia_forward_quantize quantize) {
    flamia_forward_args a = args(quantize);
    size_t bytes = 0;
    const flamia_status query = flamia_forward_workspace_size(&a, &bytes);
    if (query != FLAMIA_OK) return query;
    DeviceBuffer<uint8_t> workspace(bytes);
    a.workspace = workspace.get();
    a.workspace_bytes = bytes;
    const flamia_status status = flamia_forward(&a);
    return status != FLAMIA_OK ? status : flamia_check_device_status(a.workspace, nullptr);
  }

  void run(flamia_forward_quantize quantize, ForwardRun* out) {
    flamia_forward_args a = args(quantize);
    size_t bytes = 0;
    ASSERT_EQ(flamia_forward_workspace_size(&a, &bytes), FLAMIA_OK) << flamia_last_error_message();
    DeviceBuffer<uint8_t> workspace(bytes);
    workspace.poison();
    a.workspace = workspace.get();
    a.workspace_bytes = bytes;
    o_.poison();
    lse_.poison();
    stats_.poison();
    ASSERT_EQ(flamia_forward(&a), FLAMIA_OK) << flamia_last_error_message();
    ASSERT_EQ(flamia_check_device_status(a.workspace, nullptr), FLAMIA_OK);
    description_ = flamia_describe_forward(&a);
    out->o = o_.download();
    out->lse = lse_.download();
    out->stats = stats_.download();
  }
  const std::string& description() const { return description_; }

 private:
  const ref::Problem& p_;
  DeviceBuffer<int32_t> cu_q_, cu_k_;
  DeviceBuffer<uint16_t> q_, k_, v_, o_;
  DeviceBuffer<float> lse_, stats_;
  std::string description_;
};

template <typename T>
size_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  return a.size();
}

class FusedQuantizeTest : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedQuantizeTest, BitwiseEqualToSeparatePass) {
  FLAMIA_REQUIRE_SM90();
  const FusedCase& c = GetParam();
  ref::Problem problem =
      ref::make_problem(c.docs, c.heads_q, c.heads_kv, c.head_dim, c.causal, c.mode);
  if (!c.keys.empty()) problem.cu_seqlens_k = offsets(c.keys);
  ref::InputOptions options;
  options.seed = std::hash<std::string>{}(c.name);
  const ref::Inputs inputs = ref::make_inputs(problem, options);
  FusedForward device(problem, inputs);
  ForwardRun separate, fused, automatic;
  ASSERT_NO_FATAL_FAILURE(device.run(FLAMIA_QUANTIZE_SEPARATE, &separate));
  ASSERT_NO_FATAL_FAILURE(device.run(FLAMIA_QUANTIZE_FUSED, &fused));
  EXPECT_NE(device.description().find("quantization fused"), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(device.run(FLAMIA_QUANTIZE_AUTO, &automatic));
  EXPECT_NE(device.description().find("separate quantize pass"), std::string::npos)
      << device.description();

  EXPECT_EQ(first_difference(fused.o, separate.o), fused.o.size()) << "O differs";
  EXPECT_EQ(first_difference(fused.lse, separate.lse), fused.lse.size()) << "LSE differs";
  EXPECT_EQ(first_difference(fused.stats, separate.stats), fused.stats.size()) << "{M, l} differ";
  EXPECT_EQ(first_difference(automatic.o, separate.o), automatic.o.size()) << "AUTO's O differs";

  // Both against the contract (the separate path's own suite holds the detailed criteria).
  const ref::ForwardResult expected = ref::forward(problem, inputs);
  std::vector<float> o;
  for (uint16_t bits : fused.o) {
    o.push_back(ref::bf16_to_float(bits));
    ASSERT_TRUE(std::isfinite(o.back())) << "O not finite / not written";
  }
  const double err = ref::rel_l2(o, expected.o_bf16.to_float());
  EXPECT_LE(err, 1e-2);
  for (size_t i = 0; i < fused.lse.size(); ++i) {
    if (std::isinf(expected.lse[i])) {
      EXPECT_TRUE(std::isinf(fused.lse[i]) && fused.lse[i] < 0) << "row " << i;
    } else {
      EXPECT_NEAR(fused.lse[i], expected.lse[i], std::log(1.0 + 1.0 / 8.0) + 1e-3) << "row " << i;
    }
  }
  std::printf("[fused quantize %s] rel_l2 vs ref %.3g\n", c.name.c_str(), err);
}

TEST(FusedQuantize, HeadDim64IsUnsupported) {
  FLAMIA_REQUIRE_SM90();
  const ref::Problem problem = ref::make_problem({17, 5}, 2, 2, 64, true, ScaleMode::kExact);
  FusedForward device(problem, ref::make_inputs(problem));
  EXPECT_EQ(device.status(FLAMIA_QUANTIZE_FUSED), FLAMIA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(flamia_last_error_message()).find("head_dim 64"), std::string::npos);
  EXPECT_EQ(device.status(FLAMIA_QUANTIZE_AUTO), FLAMIA_OK);
}

std::vector<FusedCase> fused_cases() {
  std::vector<FusedCase> cases;
  // Packed short documents (1 to 64 tokens, several to a work item), an empty one, and single
  // documents of 65 to 128 tokens (one query tile each).
  const std::vector<int> short_docs = {5, 64, 1, 33, 0, 17, 63, 2, 113, 9, 40, 64, 64, 1, 128, 7};
  // Long documents: key tiles start before a document (floor16) and block32 blocks straddle
  // key tiles.
  const std::vector<int> long_docs = {300, 17, 1, 2049, 0, 700};
  for (bool causal : {true, false})
    for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
      const std::string tag = std::string("d128") + (causal ? "_causal" : "_full") +
                              (mode == ScaleMode::kExact ? "_exact" : "_block32");
      cases.push_back({tag + "_short", short_docs, {}, 4, 2, 128, causal, mode});
      cases.push_back({tag + "_long", long_docs, {}, 2, 1, 128, causal, mode});
    }
  cases.push_back(
      {"d128_tiny16", std::vector<int>(256, 16), {}, 4, 4, 128, true, ScaleMode::kExact});
  cases.push_back(
      {"d128_tiny1", std::vector<int>(300, 1), {}, 3, 1, 128, true, ScaleMode::kBlock32});
  // Non-causal with other key lengths: empty key documents, and 64 one-query documents whose
  // keys fill many key tiles of one work item.
  cases.push_back({"d128_cross_lengths",
                   {5, 64, 1, 30, 7},
                   {64, 3, 0, 100, 1},
                   4,
                   2,
                   128,
                   false,
                   ScaleMode::kBlock32});
  cases.push_back({"d128_cross_wide_keys", std::vector<int>(64, 1), std::vector<int>(64, 63), 2, 2,
                   128, false, ScaleMode::kExact});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedQuantizeTest, ::testing::ValuesIn(fused_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flamia::test
