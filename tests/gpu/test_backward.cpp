// End to end through the public C API: flamia_forward, then flamia_backward (quantize pass +
// backward kernel + dQ post-pass), against the CPU reference backward run on the GPU forward's
// own O and {M, l} (what the backward is given in training), and against float64. Outputs are
// written through padded strides and poisoned first. Also the saved operands (flamia.h): a
// forward that keeps its quantized Q, K, V gives the same bits, and so does a backward that
// reads them instead of q, k, v; a buffer of another problem is reported, never used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "flamia/flamia.h"
#include "gpu_test_utils.h"
#include "reference/api_problem.h"
#include "reference/attention_ref.h"
#include "api_problem_runner.h"
#include "test_backward_support.h"

namespace flamia::test {
namespace {

constexpr const char* kLabel = "api backward";  // tags the printed measurements

flamia_precision api_precision(BackwardPrecision p) {
  return p == BackwardPrecision::kFp8 ? FLAMIA_PRECISION_FP8 : FLAMIA_PRECISION_FP8_BF16GRAD;
}

class BackwardApiTest : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardApiTest, MatchesReference) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase& c = GetParam();
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  ApiProblem device(problem, inputs);
  ASSERT_NO_FATAL_FAILURE(device.forward());
  ApiRun run;
  ASSERT_NO_FATAL_FAILURE(device.backward(api_precision(c.precision), false, &run));

  const ref::BackwardResult expected =
      ref::backward(problem, inputs, run.o, run.stats, c.precision);
  const ref::Float64Result exact = ref::float64_attention(problem, inputs, true);
  expect_matches(kLabel, c.name, "dQ", bits_to_float(run.dq), expected.dq, exact.dq);
  expect_matches(kLabel, c.name, "dK", bits_to_float(run.dk), expected.dk, exact.dk);
  expect_matches(kLabel, c.name, "dV", bits_to_float(run.dv), expected.dv, exact.dv);
}

TEST_P(BackwardApiTest, DeterministicIsBitwiseRepeatable) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase& c = GetParam();
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  ApiProblem device(problem, inputs);
  ASSERT_NO_FATAL_FAILURE(device.forward());
  ApiRun first;
  ASSERT_NO_FATAL_FAILURE(device.backward(api_precision(c.precision), true, &first));
  ASSERT_EQ(count_not_finite(bits_to_float(first.dq)), 0u);
  ASSERT_EQ(count_not_finite(bits_to_float(first.dk)), 0u);
  ASSERT_EQ(count_not_finite(bits_to_float(first.dv)), 0u);
  for (int r = 1; r < kDeterministicRuns; ++r) {
    ApiRun again;
    ASSERT_NO_FATAL_FAILURE(device.backward(api_precision(c.precision), true, &again));
    expect_same_gradients(again, first, r);
  }
}

// The forward keeping its operands writes the same O, LSE and {M, l}; the backward reading them
// (no q, k, v) gives the same gradients, bit for bit (deterministic dQ), and in the default
// mode still matches the reference. fp8-bf16grad refuses them (CPU validation tests).
TEST_P(BackwardApiTest, SavedOperandsGiveTheSameBits) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase& c = GetParam();
  if (c.precision != BackwardPrecision::kFp8) GTEST_SKIP() << "saved operands are for fp8 only";
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  ApiProblem device(problem, inputs);
  ASSERT_NO_FATAL_FAILURE(device.forward());
  const ForwardBits plain = device.forward_bits();
  ApiRun plain_run;
  ASSERT_NO_FATAL_FAILURE(device.backward(FLAMIA_PRECISION_FP8, true, &plain_run));

  // Compared bit for bit below, rows that neither forward wrote would be equal NaN poison: no
  // NaN in the plain forward's outputs (LSE is -inf, {M, l} {0, 0} for rows without keys).
  ASSERT_EQ(count_not_finite(bits_to_float(plain.o)), 0u) << "O not written";
  ASSERT_EQ(
      std::count_if(plain.lse.begin(), plain.lse.end(), [](float x) { return std::isnan(x); }), 0)
      << "LSE not written";
  ASSERT_EQ(count_not_finite(plain.stats), 0u) << "{M, l} not written";

  ASSERT_NO_FATAL_FAILURE(device.forward(/*save=*/true));
  const ForwardBits saving = device.forward_bits();
  EXPECT_TRUE(saving.o == plain.o) << "O differs when the forward keeps its operands";
  EXPECT_EQ(std::memcmp(saving.lse.data(), plain.lse.data(), plain.lse.size() * sizeof(float)), 0)
      << "LSE differs";
  EXPECT_EQ(
      std::memcmp(saving.stats.data(), plain.stats.data(), plain.stats.size() * sizeof(float)), 0)
      << "{M, l} differ";
  ApiRun from_saved;
  ASSERT_NO_FATAL_FAILURE(
      device.backward(FLAMIA_PRECISION_FP8, true, &from_saved, &device.saved()));
  ASSERT_EQ(count_not_finite(bits_to_float(from_saved.dq)), 0u);
  ASSERT_EQ(count_not_finite(bits_to_float(from_saved.dk)), 0u);
  ASSERT_EQ(count_not_finite(bits_to_float(from_saved.dv)), 0u);
  expect_same_gradients(from_saved, plain_run, 1);

  ApiRun fast;
  ASSERT_NO_FATAL_FAILURE(device.backward(FLAMIA_PRECISION_FP8, false, &fast, &device.saved()));
  const ref::BackwardResult expected =
      ref::backward(problem, inputs, fast.o, fast.stats, c.precision);
  const ref::Float64Result exact = ref::float64_attention(problem, inputs, true);
  const std::string name = c.name + "_saved";
  expect_matches(kLabel, name, "dQ", bits_to_float(fast.dq), expected.dq, exact.dq);
  expect_matches(kLabel, name, "dK", bits_to_float(fast.dk), expected.dk, exact.dk);
  expect_matches(kLabel, name, "dV", bits_to_float(fast.dv), expected.dv, exact.dv);
}

std::vector<BackwardCase> api_cases() {
  std::vector<BackwardCase> cases;
  // The kernel test (test_backward_kernel.cpp) covers the shape matrix; here the quantize pass
  // and the launch sequence are exercised on a smaller one.
  for (int d : {64, 128})
    for (bool causal : {true, false}) {
      const std::string tag = "d" + std::to_string(d) + (causal ? "_causal" : "_full");
      cases.push_back({tag + "_mha", {1, 17, 113, 0, 300, 1100}, {}, 2, 2, d, causal});
      cases.push_back(
          {tag + "_gqa4_block32", {130, 7, 700}, {}, 8, 2, d, causal, ScaleMode::kBlock32});
      cases.push_back(
          {tag + "_gqa4_static", {130, 7, 0, 700, 64, 1}, {}, 8, 2, d, causal, ScaleMode::kStatic});
    }
  BackwardCase bf16{"d128_causal_bf16grad", {1, 17, 113, 0, 900}, {}, 4, 2, 128, true};
  bf16.precision = BackwardPrecision::kFp8Bf16Grad;
  cases.push_back(bf16);
  BackwardCase bf16_64 = bf16;
  bf16_64.name = "d64_full_bf16grad";
  bf16_64.head_dim = 64;
  bf16_64.causal = false;
  cases.push_back(bf16_64);
  BackwardCase bias{"d128_keybias_smoothed", {1000, 600}, {}, 2, 2, 128, true};
  bias.key_bias = 6.0f;
  bias.smoothing = KeySmoothing::kFirstKey;
  cases.push_back(bias);
  BackwardCase bias_static = bias;
  bias_static.name = "d128_keybias_smoothed_static";
  bias_static.mode = ScaleMode::kStatic;
  cases.push_back(bias_static);
  BackwardCase bias_plain = bias;
  bias_plain.name = "d128_keybias";
  bias_plain.smoothing = KeySmoothing::kNone;
  cases.push_back(bias_plain);
  BackwardCase sink{"d64_sink_gqa", {700, 129, 33}, {}, 4, 2, 64, true};
  sink.sink = true;
  cases.push_back(sink);
  // Static without GQA, with and without a sliding window: many key tiles of these documents have
  // an odd number of steps (1, 3, 5 query tiles of 64 per 128 keys at 300 tokens), so a CTA that
  // runs several items (the persistent kernel, capped in PersistentCtaCountChangesNoBit) starts
  // some on either stage.
  for (int d : {64, 128}) {
    const std::string tag = "d" + std::to_string(d);
    const BackwardCase plain{
        tag + "_causal_mha_static", {1, 17, 113, 0, 300, 1100}, {}, 2, 2, d, true,
        ScaleMode::kStatic};
    cases.push_back(plain);
    BackwardCase window = plain;
    window.name = tag + "_window200_static";
    window.sliding_window = 200;
    cases.push_back(window);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardApiTest, ::testing::ValuesIn(api_cases()),
                         [](const auto& info) { return info.param.name; });

// Saved operands of another problem, or never written: the backward reports it through the
// device status and its outputs are NaN (they never read the wrong operands silently). Every
// element must be a NaN the call wrote: ApiProblem::backward poisons the outputs with 0xFFFF
// first, which is a NaN too but not the poison pass's.
constexpr uint16_t kTestPoisonBits = 0xFFFF;
bool all_nan(const std::vector<uint16_t>& bits) {
  for (uint16_t b : bits)
    if (!std::isnan(ref::bf16_to_float(b)) || b == kTestPoisonBits) return false;
  return !bits.empty();
}

void expect_saved_operands_rejected(void (*mutate)(flamia_problem&), bool write_first,
                                    const char* message_part) {
  const BackwardCase c{"saved_mismatch", {17, 113, 300}, {}, 4, 2, 128, true};
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  ApiProblem device(problem, inputs);
  ASSERT_NO_FATAL_FAILURE(device.forward(/*save=*/true));
  if (!write_first) {  // a buffer of the right size that no forward filled
    ASSERT_EQ(cudaMemset(device.saved().get(), 0, device.saved().size()), cudaSuccess);
  }
  device.mutate_problem(mutate);
  ApiRun run;
  ASSERT_NO_FATAL_FAILURE(device.backward(FLAMIA_PRECISION_FP8, false, &run, &device.saved(),
                                          FLAMIA_ERROR_INVALID_ARGUMENT));
  EXPECT_NE(std::string(flamia_last_error_message()).find(message_part), std::string::npos)
      << flamia_last_error_message();
  EXPECT_TRUE(all_nan(run.dq) && all_nan(run.dk) && all_nan(run.dv));
}

TEST(BackwardSavedOperands, OfAnotherScaleModeAreReported) {
  FLAMIA_REQUIRE_SM90();
  expect_saved_operands_rejected([](flamia_problem& p) { p.scale_mode = FLAMIA_SCALE_BLOCK32; },
                                 true, "scale_mode = 0, but this problem has scale_mode = 1");
}

TEST(BackwardSavedOperands, OfAnotherKeySmoothingAreReported) {
  FLAMIA_REQUIRE_SM90();
  expect_saved_operands_rejected(
      [](flamia_problem& p) { p.key_smoothing = FLAMIA_SMOOTH_FIRST_KEY; }, true,
      "key_smoothing = 0, but this problem has key_smoothing = 1");
}

TEST(BackwardSavedOperands, NeverWrittenAreReported) {
  FLAMIA_REQUIRE_SM90();
  expect_saved_operands_rejected([](flamia_problem&) {}, false,
                                 "were not filled by a successful flamia_forward");
}

// Saved operands of a forward of another batch with the same sizes (batch count, totals,
// heads, longest document): only the header's checksum of cu_seqlens tells them apart. The
// filling forward's own backward reads them; the other batch's backward reports them.
void expect_other_batch_rejected(const BackwardCase& filled_case, const BackwardCase& other_case) {
  const ref::Problem filled = make_case_problem(filled_case);
  const ref::Problem other = make_case_problem(other_case);
  ASSERT_EQ(filled.batch(), other.batch());
  ASSERT_EQ(filled.total_q(), other.total_q());
  ASSERT_EQ(filled.total_k(), other.total_k());
  ASSERT_TRUE(filled.cu_seqlens_q != other.cu_seqlens_q ||
              filled.cu_seqlens_k != other.cu_seqlens_k);
  ApiProblem filling(filled, make_case_inputs(filled_case, filled));
  ApiProblem reading(other, make_case_inputs(other_case, other));
  ASSERT_NO_FATAL_FAILURE(filling.forward(/*save=*/true));
  ASSERT_NO_FATAL_FAILURE(reading.forward());  // its own O and {M, l}, no buffer

  ApiRun matching;  // flamia_check_device_status must give FLAMIA_OK
  ASSERT_NO_FATAL_FAILURE(
      filling.backward(FLAMIA_PRECISION_FP8, false, &matching, &filling.saved()));
  EXPECT_EQ(count_not_finite(bits_to_float(matching.dq)), 0u);
  EXPECT_EQ(count_not_finite(bits_to_float(matching.dk)), 0u);
  EXPECT_EQ(count_not_finite(bits_to_float(matching.dv)), 0u);

  ApiRun run;
  ASSERT_NO_FATAL_FAILURE(reading.backward(FLAMIA_PRECISION_FP8, false, &run, &filling.saved(),
                                           FLAMIA_ERROR_INVALID_ARGUMENT));
  const std::string message = flamia_last_error_message();
  EXPECT_NE(message.find("saved_operands were filled by a forward with other cu_seqlens"),
            std::string::npos)
      << message;
  EXPECT_TRUE(all_nan(run.dq) && all_nan(run.dk) && all_nan(run.dv));
}

// cu_seqlens {0, 17, 130, 243} filled the buffer; {0, 113, 130, 243} reads it (both arrays).
TEST(BackwardSavedOperands, OfAnotherBatchOfTheSameSizesAreReported) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase filled{"saved_batch_a", {17, 113, 113}, {}, 4, 2, 128, true};
  BackwardCase other = filled;
  other.name = "saved_batch_b";
  other.q_docs = {113, 17, 113};
  ASSERT_EQ(make_case_problem(filled).cu_seqlens_q, (std::vector<int32_t>{0, 17, 130, 243}));
  ASSERT_EQ(make_case_problem(other).cu_seqlens_q, (std::vector<int32_t>{0, 113, 130, 243}));
  expect_other_batch_rejected(filled, other);
}

// Only cu_seqlens_k differs (no causal rule ties the two arrays).
TEST(BackwardSavedOperands, OfOtherKeyDocumentsAreReported) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase filled{"saved_keys_a", {40, 1, 100}, {17, 113, 113}, 4, 2, 64, false};
  BackwardCase other = filled;
  other.name = "saved_keys_b";
  other.k_docs = {113, 17, 113};
  expect_other_batch_rejected(filled, other);
}

}  // namespace
}  // namespace flamia::test
