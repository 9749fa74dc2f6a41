// The backward kernel alone, fed with the reference's quantized operands and the reference
// forward's O and {M, l} (so a quantize-pass or forward bug cannot hide here), against the CPU
// reference backward of the contract (docs/numerics.md §5) and against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_utils.h"
#include "reference/attention_internal.h"
#include "reference/attention_ref.h"
#include "test_backward_support.h"

namespace flamia::test {
namespace {

constexpr const char* kLabel = "backward";  // tags the printed measurements

// A case as the kernel tests feed it: problem and inputs, the reference forward, and the
// reference's operands (from that forward's O and {M, l}) on the device.
struct KernelCase {
  explicit KernelCase(const BackwardCase& c)
      : problem(make_case_problem(c)),
        inputs(make_case_inputs(c, problem)),
        forward(ref::forward(problem, inputs)),
        ops(make_host_operands(problem, inputs, forward.o_bf16, forward.softmax_stats)),
        device(problem, inputs, ops, forward.softmax_stats) {}
  KernelCase(const KernelCase&) = delete;  // `device` refers to `problem`
  KernelCase& operator=(const KernelCase&) = delete;

  // The contract's backward of the reference forward.
  ref::BackwardResult expected(BackwardPrecision precision) const {
    return ref::backward(problem, inputs, forward.o_bf16, forward.softmax_stats, precision);
  }

  const ref::Problem problem;
  const ref::Inputs inputs;
  const ref::ForwardResult forward;
  const HostOperands ops;
  DeviceBackwardProblem device;
};

class BackwardKernelTest : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardKernelTest, MatchesReference) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase& c = GetParam();
  KernelCase k(c);
  const ref::BackwardResult expected = k.expected(c.precision);
  const ref::Float64Result exact = ref::float64_attention(k.problem, k.inputs, true);

  const BackwardRun run = k.device.run(c.precision, /*deterministic=*/false);
  ASSERT_EQ(run.launch, cudaSuccess) << cudaGetErrorString(run.launch);
  ASSERT_EQ(run.sync, cudaSuccess) << cudaGetErrorString(run.sync);
  expect_matches(kLabel, c.name, "dQ", bits_to_float(run.dq), expected.dq, exact.dq);
  expect_matches(kLabel, c.name, "dK", bits_to_float(run.dk), expected.dk, exact.dk);
  expect_matches(kLabel, c.name, "dV", bits_to_float(run.dv), expected.dv, exact.dv);
}

std::vector<BackwardCase> backward_cases() {
  std::vector<BackwardCase> cases;
  // Awkward lengths; one long document below (the CPU float64 reference dominates the time).
  const std::vector<int> awkward = {1, 17, 113, 0, 300, 529};
  for (int d : {64, 128})
    for (bool causal : {true, false})
      for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
        const std::string tag = "d" + std::to_string(d) + (causal ? "_causal" : "_full") +
                                (mode == ScaleMode::kExact ? "_exact" : "_block32");
        BackwardCase mha{tag + "_mha", awkward, {}, 2, 2, d, causal, mode};
        cases.push_back(mha);
        BackwardCase gqa{tag + "_gqa4", {130, 7, 700}, {}, 8, 2, d, causal, mode};
        cases.push_back(gqa);
      }
  for (int d : {64, 128})
    for (bool causal : {true, false}) {
      BackwardCase c{"d" + std::to_string(d) + (causal ? "_causal" : "_full") + "_bf16grad",
                     {1, 17, 113, 0, 300, 1100},
                     {},
                     4,
                     2,
                     d,
                     causal};
      c.precision = BackwardPrecision::kFp8Bf16Grad;
      cases.push_back(c);
    }
  // Non-causal documents with unequal lengths, including queries without keys (dQ = 0) and keys
  // without queries (dK = dV = 0).
  BackwardCase cross{
      "d128_full_unequal", {17, 0, 113, 64, 30}, {113, 40, 0, 64, 1}, 2, 1, 128, false};
  cases.push_back(cross);
  BackwardCase cross64 = cross;
  cross64.name = "d64_full_unequal";
  cross64.head_dim = 64;
  cases.push_back(cross64);
  BackwardCase long_doc{"d128_causal_long", {2049, 33}, {}, 2, 1, 128, true};
  cases.push_back(long_doc);
  BackwardCase mqa{"d128_causal_mqa", {500, 77}, {}, 4, 1, 128, true};
  cases.push_back(mqa);
  BackwardCase bias{"d128_keybias", {1000, 600}, {}, 2, 2, 128, true};
  bias.key_bias = 6.0f;
  cases.push_back(bias);
  BackwardCase smoothed = bias;
  smoothed.name = "d128_keybias_smoothed";
  smoothed.smoothing = KeySmoothing::kFirstKey;
  cases.push_back(smoothed);
  BackwardCase bias16 = bias;
  bias16.name = "d128_keybias_bf16grad";
  bias16.precision = BackwardPrecision::kFp8Bf16Grad;
  cases.push_back(bias16);
  BackwardCase sink{"d64_sink", {700, 129, 33}, {}, 4, 2, 64, true};
  sink.sink = true;
  cases.push_back(sink);
  BackwardCase sink_block{"d128_sink_block32", {700, 129, 33}, {}, 2, 1, 128, true,
                          ScaleMode::kBlock32};
  sink_block.sink = true;
  cases.push_back(sink_block);
  BackwardCase tiny{"d64_many_tiny", std::vector<int>(300, 5), {}, 4, 4, 64, true};
  cases.push_back(tiny);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardKernelTest, ::testing::ValuesIn(backward_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- deterministic option ----------------------------------------------------------------------

class BackwardDeterminismTest : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardDeterminismTest, BitwiseRepeatable) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase& c = GetParam();
  KernelCase k(c);

  const BackwardRun first = k.device.run(c.precision, /*deterministic=*/true);
  ASSERT_EQ(first.launch, cudaSuccess) << cudaGetErrorString(first.launch);
  ASSERT_EQ(first.sync, cudaSuccess) << cudaGetErrorString(first.sync);
  ASSERT_EQ(count_not_finite(bits_to_float(first.dq)), 0u);
  for (int run = 1; run < kDeterministicRuns; ++run) {
    const BackwardRun again = k.device.run(c.precision, /*deterministic=*/true);
    ASSERT_EQ(again.sync, cudaSuccess);
    expect_same_gradients(again, first, run);
  }
  // The deterministic order changes only how dQ partials are added: dK and dV are computed in
  // one CTA either way, and dQ stays as accurate.
  const BackwardRun atomic = k.device.run(c.precision, /*deterministic=*/false);
  EXPECT_TRUE(atomic.dk == first.dk);
  EXPECT_TRUE(atomic.dv == first.dv);
  const ref::BackwardResult expected = k.expected(c.precision);
  EXPECT_LE(ref::rel_l2(bits_to_float(first.dq), expected.dq), kMaxErrorVsReference);
}

std::vector<BackwardCase> determinism_cases() {
  BackwardCase gqa{"d128_causal_gqa", {1000, 300, 17}, {}, 4, 2, 128, true};
  BackwardCase full{"d64_full_mha", {640, 1, 257}, {}, 2, 2, 64, false};
  BackwardCase bf16{"d128_causal_bf16grad", {700, 45}, {}, 2, 1, 128, true};
  bf16.precision = BackwardPrecision::kFp8Bf16Grad;
  return {gqa, full, bf16};
}

INSTANTIATE_TEST_SUITE_P(Deterministic, BackwardDeterminismTest,
                         ::testing::ValuesIn(determinism_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- P̂ rebuilt by the backward vs the contract's P̂ ----------------------------------------------

// The backward's P̂ (debug output) against e4m3(exp2(t - M + 8)) of the reference, with the
// reference's M: they may differ only where ex2.approx and the reference's exp2 (or the order
// of the offset subtraction) round across an E4M3 boundary, by one step.
class BackwardProbabilityTest : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardProbabilityTest, RebuildsContractProbabilities) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase& c = GetParam();
  KernelCase k(c);
  const BackwardRun run = k.device.run(c.precision, false, /*debug_p_hat=*/true);
  ASSERT_EQ(run.sync, cudaSuccess) << cudaGetErrorString(run.sync);

  const ref::Problem& problem = k.problem;
  const ref::internal::ScoreOperands score(problem, k.ops.fwd);
  const int total_q = problem.total_q(), total_k = problem.total_k();
  size_t visible = 0, differ = 0, far = 0;
  std::vector<float> t(size_t(total_k) + 1);
  for (int h = 0; h < problem.heads_q; ++h)
    for (int b = 0; b < problem.batch(); ++b) {
      const int k_begin = problem.cu_seqlens_k[b];
      for (int i = problem.cu_seqlens_q[b]; i < problem.cu_seqlens_q[b + 1]; ++i) {
        const int n = ref::internal::visible_keys(problem, b, i);
        if (n <= 0) continue;
        score.logits(h, i, k_begin, n, t.data());
        const float m = k.forward.softmax_stats[(size_t(h) * total_q + i) * 2];
        for (int jj = 0; jj < n; ++jj) {
          const uint8_t want = e4m3_encode(ref::internal::ScoreOperands::shifted_exp2(t[jj], m));
          // The hook writes P̂ * 2^(M - 8); M - 8 is an integer, the division exact.
          const float got_value = run.p_hat[(size_t(h) * total_q + i) * total_k + k_begin + jj];
          const uint8_t got = e4m3_encode(got_value * exp2_int(kSoftmaxOffset - int(m)));
          ++visible;
          if (got != want) {
            ++differ;
            far += std::abs(int(got) - int(want)) > 1;
          }
        }
      }
    }
  std::printf("[backward %s] P̂ vs contract: %zu of %zu visible elements differ (%.3g)\n",
              c.name.c_str(), differ, visible, visible ? double(differ) / visible : 0.0);
  EXPECT_GT(visible, 0u);
  EXPECT_EQ(far, 0u) << "P̂ differs by more than one E4M3 step";
  // against the CPU contract (exact S): flips at E4M3 rounding boundaries, measured <= 1.1e-3
  EXPECT_LE(double(differ), 2e-3 * double(visible) + 1.0);
}

std::vector<BackwardCase> probability_cases() {
  BackwardCase causal{"d64_causal", {17, 113, 0, 200}, {}, 2, 1, 64, true};
  BackwardCase full{"d128_full", {33, 150}, {}, 2, 2, 128, false};
  BackwardCase sink{"d128_causal_sink_block32", {160, 40}, {}, 2, 1, 128, true,
                    ScaleMode::kBlock32};
  sink.sink = true;
  return {causal, full, sink};
}

INSTANTIATE_TEST_SUITE_P(Probabilities, BackwardProbabilityTest,
                         ::testing::ValuesIn(probability_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flamia::test
