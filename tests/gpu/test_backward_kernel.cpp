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
  // Short documents that pack into runs (key_tiles.h: 48 | 1 | 2 30 5 5 5 | 16 16 16), between
  // ones that do not (across a 64-token window edge, or longer), with GQA.
  const std::vector<int> short_docs = {48, 63, 1, 64, 65, 17, 2, 30, 5, 5, 5, 140, 16, 16, 16, 16};
  for (int d : {64, 128})
    for (bool causal : {true, false})
      for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
        if (mode == ScaleMode::kBlock32 && !causal) continue;
        const std::string tag = "d" + std::to_string(d) + (causal ? "_causal" : "_full") +
                                (mode == ScaleMode::kExact ? "_exact" : "_block32");
        cases.push_back({tag + "_packed_gqa4", short_docs, {}, 8, 2, d, causal, mode});
      }
  // Sliding windows (causal): two keys (one key has exactly zero dQ and dK: nothing to compare
  // relatively), shorter than a key tile, a key tile's worth, across tiles, wider than the
  // documents; packed short documents with a window shorter than some of them; both
  // precisions, GQA.
  for (int d : {64, 128})
    for (int window : {2, 17, 128, 301, 5000}) {
      BackwardCase c{
          "d" + std::to_string(d) + "_window" + std::to_string(window), awkward, {}, 8, 2, d, true,
          window % 2 ? ScaleMode::kExact : ScaleMode::kBlock32};
      c.sliding_window = window;
      cases.push_back(c);
    }
  {
    BackwardCase packed{"d128_window9_packed_gqa4", short_docs, {}, 8, 2, 128, true};
    packed.sliding_window = 9;
    cases.push_back(packed);
    BackwardCase bf16{"d128_window200_bf16grad", {1, 17, 113, 0, 300, 1100}, {}, 4, 2, 128, true};
    bf16.precision = BackwardPrecision::kFp8Bf16Grad;
    bf16.sliding_window = 200;
    cases.push_back(bf16);
  }
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
  // All three: the repeats and the atomic run are compared with these bit for bit, which
  // elements that no run wrote (NaN poison in each) would pass.
  ASSERT_EQ(count_not_finite(bits_to_float(first.dq)), 0u);
  ASSERT_EQ(count_not_finite(bits_to_float(first.dk)), 0u);
  ASSERT_EQ(count_not_finite(bits_to_float(first.dv)), 0u);
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
  EXPECT_LE(ref::rel_l2(bits_to_float(first.dk), expected.dk), kMaxErrorVsReference);
  EXPECT_LE(ref::rel_l2(bits_to_float(first.dv), expected.dv), kMaxErrorVsReference);
}

std::vector<BackwardCase> determinism_cases() {
  BackwardCase gqa{"d128_causal_gqa", {1000, 300, 17}, {}, 4, 2, 128, true};
  BackwardCase full{"d64_full_mha", {640, 1, 257}, {}, 2, 2, 64, false};
  BackwardCase bf16{"d128_causal_bf16grad", {700, 45}, {}, 2, 1, 128, true};
  BackwardCase packed{"d128_causal_packed_gqa", {5, 9, 30, 3, 200, 7, 7, 7}, {}, 4, 2, 128, true};
  bf16.precision = BackwardPrecision::kFp8Bf16Grad;
  // a sliding window: each query tile's dQ order starts at the first key tile it sees
  BackwardCase window{"d128_causal_window300", {1000, 300, 17}, {}, 4, 2, 128, true};
  window.sliding_window = 300;
  BackwardCase window16 = window;
  window16.name = "d64_causal_window100_bf16grad";
  window16.head_dim = 64;
  window16.sliding_window = 100;
  window16.precision = BackwardPrecision::kFp8Bf16Grad;
  return {gqa, full, bf16, packed, window, window16};
}

INSTANTIATE_TEST_SUITE_P(Deterministic, BackwardDeterminismTest,
                         ::testing::ValuesIn(determinism_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- document isolation -------------------------------------------------------------------------

// A document's tiles start at floor16 of its first token and run past its last, so they also
// cover tokens of its neighbours (and the FP8 path's TMA copies them in). Those must never reach
// a product: with every operand byte of documents 0 and 2 set to E4M3 NaN, document 1's dQ, dK
// and dV are bit for bit those of the clean run (deterministic dQ, so that it compares bitwise).
constexpr uint8_t kE4m3Nan = 0x7F;

struct TokenRangeOf {
  int lo, hi;
  bool contains(int t) const { return t >= lo && t < hi; }
};

void poison_rows(std::vector<uint8_t>& values, int heads, int d, TokenRangeOf doc) {
  for (int t = doc.lo; t < doc.hi; ++t)
    std::fill_n(values.begin() + size_t(t) * heads * d, size_t(heads) * d, kE4m3Nan);
}

// Token-major [heads][D][padded] copies; permuted: slot p of each group of 16 holds token
// 16 (p / 16) + permuted_token(p % 16).
void poison_token_major(std::vector<uint8_t>& values, int padded, TokenRangeOf doc, bool permuted) {
  for (size_t at = 0; at < values.size(); ++at) {
    const int slot = int(at % size_t(padded));
    const int token = permuted ? slot - slot % 16 + permuted_token(slot % 16) : slot;
    if (doc.contains(token)) values[at] = kE4m3Nan;
  }
}

HostOperands with_poisoned_document(const ref::Problem& p, HostOperands ops, int doc_index) {
  const TokenRangeOf q{p.cu_seqlens_q[doc_index], p.cu_seqlens_q[doc_index + 1]};
  const TokenRangeOf k{p.cu_seqlens_k[doc_index], p.cu_seqlens_k[doc_index + 1]};
  const int d = p.head_dim;
  const int padded_q = int(padded_tokens(p.total_q())), padded_k = int(padded_tokens(p.total_k()));
  poison_rows(ops.fwd.q.values, p.heads_q, d, q);
  poison_rows(ops.bwd.d_o.values, p.heads_q, d, q);
  poison_rows(ops.fwd.k.values, p.heads_kv, d, k);
  poison_rows(ops.fwd.v.values, p.heads_kv, d, k);
  poison_token_major(ops.bwd.q_t, padded_q, q, /*permuted=*/true);
  poison_token_major(ops.bwd.d_o_scaled_t, padded_q, q, /*permuted=*/true);
  poison_token_major(ops.fwd.v_t, padded_k, k, /*permuted=*/true);
  poison_token_major(ops.bwd.k_centered_t, padded_k, k, /*permuted=*/false);
  return ops;
}

// Rows [lo, hi) of a dense [tokens][heads][D] BF16 gradient.
std::vector<uint16_t> token_rows(const std::vector<uint16_t>& g, int heads, int d, TokenRangeOf r) {
  return std::vector<uint16_t>(g.begin() + size_t(r.lo) * heads * d,
                               g.begin() + size_t(r.hi) * heads * d);
}

// Runs the case on clean operands and on operands with every byte of the documents `poisoned` set
// to E4M3 NaN (deterministic dQ, so that it compares bitwise): the gradients of the documents
// [clean_first, clean_end) must be bit for bit the clean run's, and finite, and the poison live
// (document poisoned[0]'s own dQ not finite).
void expect_poison_stays_out(const BackwardCase& c, const std::vector<int>& poisoned,
                             int clean_first, int clean_end) {
  KernelCase k(c);
  const ref::Problem& p = k.problem;
  HostOperands ops = k.ops;
  for (int doc : poisoned) ops = with_poisoned_document(p, ops, doc);
  DeviceBackwardProblem dirty(p, k.inputs, ops, k.forward.softmax_stats);
  const BackwardRun clean_run = k.device.run(c.precision, /*deterministic=*/true);
  const BackwardRun dirty_run = dirty.run(c.precision, /*deterministic=*/true);
  ASSERT_EQ(clean_run.sync, cudaSuccess) << cudaGetErrorString(clean_run.sync);
  ASSERT_EQ(dirty_run.sync, cudaSuccess) << cudaGetErrorString(dirty_run.sync);

  const int d = p.head_dim;
  const TokenRangeOf q{p.cu_seqlens_q[clean_first], p.cu_seqlens_q[clean_end]};
  const TokenRangeOf k_rows{p.cu_seqlens_k[clean_first], p.cu_seqlens_k[clean_end]};
  const TokenRangeOf witness{p.cu_seqlens_q[poisoned[0]], p.cu_seqlens_q[poisoned[0] + 1]};
  const std::string clean =
      "of documents " + std::to_string(clean_first) + " to " + std::to_string(clean_end - 1);
  EXPECT_GT(count_not_finite(bits_to_float(token_rows(dirty_run.dq, p.heads_q, d, witness))), 0u);
  const std::vector<uint16_t> dq = token_rows(clean_run.dq, p.heads_q, d, q);
  EXPECT_EQ(count_not_finite(bits_to_float(dq)), 0u);
  // dK and dV too: compared bitwise below, rows neither run wrote would be equal NaN poison.
  EXPECT_EQ(count_not_finite(bits_to_float(token_rows(clean_run.dk, p.heads_kv, d, k_rows))), 0u);
  EXPECT_EQ(count_not_finite(bits_to_float(token_rows(clean_run.dv, p.heads_kv, d, k_rows))), 0u);
  EXPECT_TRUE(token_rows(dirty_run.dq, p.heads_q, d, q) == dq) << "dQ " << clean;
  EXPECT_TRUE(token_rows(dirty_run.dk, p.heads_kv, d, k_rows) ==
              token_rows(clean_run.dk, p.heads_kv, d, k_rows))
      << "dK " << clean;
  EXPECT_TRUE(token_rows(dirty_run.dv, p.heads_kv, d, k_rows) ==
              token_rows(clean_run.dv, p.heads_kv, d, k_rows))
      << "dV " << clean;
}

class BackwardIsolationTest : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardIsolationTest, NeighbourNaNsStayOut) {
  FLAMIA_REQUIRE_SM90();
  expect_poison_stays_out(GetParam(), {0, 2}, 1, 2);
}

std::vector<BackwardCase> isolation_cases() {
  std::vector<BackwardCase> cases;
  for (int d : {64, 128})
    for (bool causal : {true, false})
      for (BackwardPrecision precision :
           {BackwardPrecision::kFp8, BackwardPrecision::kFp8Bf16Grad}) {
        BackwardCase c{"d" + std::to_string(d) + (causal ? "_causal" : "_full") +
                           (precision == BackwardPrecision::kFp8 ? "_fp8" : "_bf16grad"),
                       {100, 77, 150},
                       {},
                       4,
                       2,
                       d,
                       causal};
        c.precision = precision;
        cases.push_back(c);
      }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Documents, BackwardIsolationTest, ::testing::ValuesIn(isolation_cases()),
                         [](const auto& info) { return info.param.name; });

// Documents 1 and 2 (20 tokens each, in the window [128, 192)) pack into one run, which shares a
// CTA (key_tiles.h); its neighbours 0 and 3 do not pack. With every operand byte of the
// neighbours set to NaN, the run's gradients are those of the clean run, bit for bit: the
// packed CTA masks everything outside the run as an ordinary one masks everything outside its
// document. (Inside a run a NaN may reach the run's other documents: numerics.md.)
class BackwardPackedIsolationTest : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardPackedIsolationTest, NeighbourNaNsStayOutOfTheRun) {
  FLAMIA_REQUIRE_SM90();
  expect_poison_stays_out(GetParam(), {0, 3}, 1, 3);
}

std::vector<BackwardCase> packed_isolation_cases() {
  std::vector<BackwardCase> cases;
  for (int d : {64, 128})
    for (bool causal : {true, false})
      cases.push_back({"d" + std::to_string(d) + (causal ? "_causal" : "_full"),
                       {128, 20, 20, 150},
                       {},
                       4,
                       2,
                       d,
                       causal});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(PackedRun, BackwardPackedIsolationTest,
                         ::testing::ValuesIn(packed_isolation_cases()),
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
  size_t visible = 0, differ = 0, far = 0, not_written = 0;
  std::vector<float> t(size_t(total_k) + 1), s(size_t(total_k) + 1);
  for (int h = 0; h < problem.heads_q; ++h)
    for (int b = 0; b < problem.batch(); ++b) {
      const int k_begin = problem.cu_seqlens_k[b];
      for (int i = problem.cu_seqlens_q[b]; i < problem.cu_seqlens_q[b + 1]; ++i) {
        const int n = ref::internal::visible_keys(problem, b, i);
        if (n <= 0) continue;
        score.logits(h, i, k_begin, n, t.data(), s.data());
        const float m = k.forward.softmax_stats[(size_t(h) * total_q + i) * 2];
        for (int jj = 0; jj < n; ++jj) {
          const uint8_t want = e4m3_encode(score.shifted_exp2(h, i, k_begin + jj, t[jj], s[jj], m));
          // The hook writes P̂ * 2^(M - 8); M - 8 is an integer, the division exact.
          const float got_value = run.p_hat[(size_t(h) * total_q + i) * total_k + k_begin + jj];
          not_written += !std::isfinite(got_value);  // the NaN poison of run()
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
  EXPECT_EQ(not_written, 0u) << "visible P̂ not written by the debug hook";
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
