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

#include "api_problem_runner.h"
#include "forward_cases.h"
#include "flamia/flamia.h"
#include "gpu_test_utils.h"
#include "reference/api_problem.h"
#include "reference/attention_ref.h"

namespace flamia::test {
namespace {

// The forward through `quantize`'s path: O, LSE and {M, l} as bits, and its description.
ForwardBits run(ApiProblem& device, flamia_forward_quantize quantize, std::string* description) {
  device.forward(/*save=*/false, quantize);
  *description = device.description();
  return device.forward_bits();
}

class FusedQuantizeTest : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(FusedQuantizeTest, BitwiseEqualToSeparatePass) {
  FLAMIA_REQUIRE_SM90();
  const ForwardCase& c = GetParam();
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  ApiProblem device(problem, inputs);
  std::string description;
  const ForwardBits separate = run(device, FLAMIA_QUANTIZE_SEPARATE, &description);
  const ForwardBits fused = run(device, FLAMIA_QUANTIZE_FUSED, &description);
  EXPECT_NE(description.find("quantization fused"), std::string::npos) << description;
  const ForwardBits automatic = run(device, FLAMIA_QUANTIZE_AUTO, &description);
  EXPECT_NE(description.find("separate quantize pass"), std::string::npos) << description;

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
  // LSE as before, and {M, l}, which were compared only between the two paths (both poisoned
  // the same way, so rows neither wrote compared equal).
  expect_lse_and_stats_match(fused.lse, fused.stats, expected);
  std::printf("[fused quantize %s] rel_l2 vs ref %.3g\n", c.name.c_str(), err);
}

TEST(FusedQuantize, HeadDim64IsUnsupported) {
  FLAMIA_REQUIRE_SM90();
  const ref::Problem problem = ref::make_problem({17, 5}, 2, 2, 64, true, ScaleMode::kExact);
  const ref::Inputs inputs = ref::make_inputs(problem);
  ApiProblem device(problem, inputs);
  EXPECT_EQ(device.forward_status(FLAMIA_QUANTIZE_FUSED), FLAMIA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(flamia_last_error_message()).find("head_dim 64"), std::string::npos);
  EXPECT_EQ(device.forward_status(FLAMIA_QUANTIZE_AUTO), FLAMIA_OK);
}

std::vector<ForwardCase> fused_cases() {
  std::vector<ForwardCase> cases;
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
