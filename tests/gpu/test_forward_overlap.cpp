// The overlapped forward (src/api/overlap.h: the quantize pass and the attention per chunk of
// KV heads, on internal streams) against the plain one (FLAMIA_FORWARD_OVERLAP=off) through the
// public C API: O, LSE, {M, l} and, when the forward keeps its operands, every byte of the saved
// buffer must be equal, for every chunk count, in every scale mode, with both key smoothings,
// GQA and both head dims. Outputs and the saved buffer are poisoned before every run; the plain
// run is checked against the CPU reference, so equal bits are right bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "api_problem_runner.h"
#include "forward_cases.h"
#include "flamia/flamia.h"
#include "gpu_test_utils.h"
#include "reference/attention_ref.h"

namespace flamia::test {
namespace {

struct ForwardOutcome {
  ForwardBits bits;
  std::vector<uint8_t> saved;  // the saved-operands buffer (empty when not kept)
};

// `amax`: with flamia_forward_args.kv_amax (an extra output of the K and V copies) or without.
ForwardOutcome run_forward(ApiProblem& device, const std::string& overlap, bool keep_operands,
                           bool amax) {
  const OverlapSetting setting(overlap);
  ForwardOutcome outcome;
  device.forward(keep_operands, FLAMIA_QUANTIZE_AUTO, amax);
  outcome.bits = device.forward_bits();
  if (keep_operands) outcome.saved = device.saved().download();
  return outcome;
}

class ForwardOverlapTest : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardOverlapTest, EveryChunkingGivesThePlainForwardsBits) {
  FLAMIA_REQUIRE_SM90();
  const ForwardCase& c = GetParam();
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  ApiProblem device(problem, inputs);

  for (bool keep : {false, true}) {
    const ForwardOutcome plain = run_forward(device, "off", keep, /*amax=*/true);
    // The plain forward against the contract (its own suites hold the detailed criteria).
    const ref::ForwardResult expected = ref::forward(problem, inputs);
    std::vector<float> o;
    for (uint16_t bits : plain.bits.o) {
      o.push_back(ref::bf16_to_float(bits));
      ASSERT_TRUE(std::isfinite(o.back())) << "O not finite / not written";
    }
    const double err = ref::rel_l2(o, expected.o_bf16.to_float());
    EXPECT_LE(err, 1e-2);
    // Its LSE and {M, l} too: the chunked runs are compared with them bit for bit, which a row
    // that no run wrote (poison in both) would pass.
    expect_lse_and_stats_match(plain.bits.lse, plain.bits.stats, expected);

    // "auto" included: whatever the default plan is, it must not change a bit.
    bool amax = false;  // every other setting without the amax output
    for (const char* overlap : {"2:8", "4:16:1", "8:1", "3:60", "auto"}) {
      amax = !amax;
      SCOPED_TRACE(std::string("FLAMIA_FORWARD_OVERLAP=") + overlap +
                   (keep ? ", keeping operands" : ""));
      const ForwardOutcome chunked = run_forward(device, overlap, keep, amax);
      EXPECT_EQ(first_difference(chunked.bits.o, plain.bits.o), plain.bits.o.size()) << "O differs";
      EXPECT_EQ(first_difference(chunked.bits.lse, plain.bits.lse), plain.bits.lse.size())
          << "LSE differs";
      EXPECT_EQ(first_difference(chunked.bits.stats, plain.bits.stats), plain.bits.stats.size())
          << "{M, l} differ";
      EXPECT_EQ(first_difference(chunked.saved, plain.saved), plain.saved.size())
          << "saved operands differ";
    }
    std::printf("[forward overlap %s%s] rel_l2 vs ref %.3g\n", c.name.c_str(), keep ? " keep" : "",
                err);
  }
}

std::vector<ForwardCase> overlap_cases() {
  const std::vector<int> long_docs = {300, 17, 1, 2049, 0, 700};
  const std::vector<int> awkward = {130, 7, 0, 700, 64, 1, 113};
  const std::vector<int> short_docs = {5, 64, 1, 33, 0, 17, 63, 2, 113, 9, 40, 64, 64, 1, 128, 7};
  const std::vector<int> unequal_q = {17, 0, 113, 64, 30, 5, 200, 150, 1, 40};
  const std::vector<int> unequal_k = {113, 40, 0, 64, 1, 0, 3, 0, 2051, 0};
  using M = ScaleMode;
  using S = KeySmoothing;
  return {
      {"d128_exact_gqa4", long_docs, {}, 16, 4, 128, true, M::kExact, S::kNone},
      {"d64_static_gqa2", awkward, {}, 8, 4, 64, true, M::kStatic, S::kNone},
      {"d128_static_mha", long_docs, {}, 8, 8, 128, true, M::kStatic, S::kNone},
      {"d128_block32_full", short_docs, {}, 4, 4, 128, false, M::kBlock32, S::kNone},
      {"d128_exact_first_key", awkward, {}, 8, 8, 128, true, M::kExact, S::kFirstKey},
      {"d64_exact_vector_gqa2", long_docs, {}, 6, 3, 64, true, M::kExact, S::kVector},
      {"d128_static_tiny16", std::vector<int>(256, 16), {}, 4, 4, 128, true, M::kStatic, S::kNone},
      // GQA with first-key smoothing: the LSE shift reads each chunk's keys (kv = q / group)
      {"d64_block32_first_key_gqa4", awkward, {}, 8, 2, 64, true, M::kBlock32, S::kFirstKey},
      {"d128_exact_window_gqa2", long_docs, {}, 8, 4, 128, true, M::kExact, S::kNone, 100},
      // Non-causal, other key lengths: queries without keys (O = 0, LSE = -inf), keys without
      // queries, a packed segment with a keyless member, one query over many key tiles.
      {"d64_static_full_unequal", unequal_q, unequal_k, 8, 4, 64, false, M::kStatic, S::kNone},
      {"d128_exact_full_unequal_vector", unequal_q, unequal_k, 4, 2, 128, false, M::kExact,
       S::kVector},
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, ForwardOverlapTest, ::testing::ValuesIn(overlap_cases()),
                         [](const auto& info) { return info.param.name; });
// (A bad FLAMIA_FORWARD_OVERLAP is an argument error: tests/cpu/test_api_validation.cpp.)

}  // namespace
}  // namespace flamia::test
