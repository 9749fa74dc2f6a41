// The reference forward: the contract's formulas re-evaluated independently for single rows,
// accuracy against float64 over head dims, GQA ratios, scale modes, causal and not, awkward
// document lengths; GQA head mapping; fully masked rows; argument checks; thread independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>

#include "reference/attention_ref.h"
#include "ref_test_util.h"

namespace flamia::ref {
namespace {

// Relative L2 error of the FP8 forward against float64 on N(0,1) data: E4M3's rounding gives
// ~5e-2; much less would mean the quantization is not applied.
constexpr double kMaxForwardError = 0.08;
constexpr double kMinForwardError = 0.01;
constexpr double kMaxLseError = 0.25;  // absolute, natural log units

// Numerics §4 for one row, written out directly from the quantized operands.
struct RowResult {
  std::vector<float> o;
  float lse, m, l;
};
RowResult naive_row(const Problem& p, const ForwardOperandsRef& ops, int h, int b, int i) {
  const int g = p.kv_head(h), dim = p.head_dim;
  const int k0 = p.cu_seqlens_k[b];
  const int n = p.causal ? i - p.cu_seqlens_q[b] + 1 : p.cu_seqlens_k[b + 1] - k0;
  const float c = p.softmax_scale * kLog2e;
  const bool static_scales = p.scale_mode == ScaleMode::kStatic;
  std::vector<float> t(n), s(n), factor(n);
  for (int jj = 0; jj < n; ++jj) {
    double dot = 0.0;
    for (int d = 0; d < dim; ++d)
      dot += double(e4m3_decode(ops.q.value(i, h, d))) *
             double(e4m3_decode(ops.k.value(k0 + jj, g, d)));
    s[jj] = float(dot);
    const float row_factor = c * exp2_int(ops.q.exponent(i, h));
    const float key_scale = exp2_int(ops.k.exponent(k0 + jj, g));
    factor[jj] = static_scales ? static_row_factor(row_factor, key_scale) : row_factor * key_scale;
    t[jj] = std::fmaf(s[jj], factor[jj], float(ops.v.exponent(k0 + jj, g)));
  }
  float tmax = -INFINITY;
  for (float x : t) tmax = std::max(tmax, x);
  const float m = std::ceil(tmax);
  double l = 0.0;
  std::vector<double> acc(dim, 0.0);
  for (int jj = 0; jj < n; ++jj) {
    // static: the offset inside the one fma (numerics §4, static)
    const float e =
        static_scales
            ? exp2f(std::fmaf(s[jj], factor[jj], float(ops.v.exponent(k0 + jj, g)) - (m - 8.0f)))
            : exp2f(t[jj] - m + 8.0f);
    const double p_hat = e4m3_decode(e4m3_encode(e));
    l += p_hat * exp2_int(-ops.v.exponent(k0 + jj, g));
    for (int d = 0; d < dim; ++d) acc[d] += p_hat * e4m3_decode(ops.v.value(k0 + jj, g, d));
  }
  RowResult r;
  r.m = m;
  r.l = float(l);
  for (int d = 0; d < dim; ++d) r.o.push_back(float(acc[d]) / r.l);
  r.lse = std::log(r.l) + (m - 8.0f) * kLn2;
  if (!ops.lse_shift.empty()) r.lse += ops.lse_shift[size_t(h) * p.total_q() + i];
  return r;
}

TEST(ReferenceForward, MatchesTheContractRowByRow) {
  for (ScaleMode mode : {ScaleMode::kBlock32, ScaleMode::kStatic})
    for (KeySmoothing smoothing : {KeySmoothing::kNone, KeySmoothing::kFirstKey}) {
      for (bool causal : {true, false}) {
        Problem p = make_problem({1, 17, 0, 50}, 4, 2, 64, causal, mode);
        p.key_smoothing = smoothing;
        const Inputs in = make_inputs(p, {31, 2.0f});
        const ForwardResult f = forward(p, in);
        const ForwardOperandsRef ops = quantize_forward_operands(p, in);
        for (int h = 0; h < p.heads_q; ++h)
          for (int b = 0; b < p.batch(); ++b)
            for (int i = p.cu_seqlens_q[b]; i < p.cu_seqlens_q[b + 1]; ++i) {
              const RowResult want = naive_row(p, ops, h, b, i);
              const size_t row = size_t(h) * p.total_q() + i;
              ASSERT_EQ(f.softmax_stats[row * 2], want.m);
              ASSERT_EQ(f.softmax_stats[row * 2 + 1], want.l);
              ASSERT_EQ(f.lse[row], want.lse);
              for (int d = 0; d < p.head_dim; ++d) {
                ASSERT_EQ(f.o[(size_t(i) * p.heads_q + h) * p.head_dim + d], want.o[d]);
                ASSERT_EQ(f.o_bf16.bits[f.o_bf16.index(i, h, d)], float_to_bf16(want.o[d]));
              }
              ASSERT_EQ(want.m, std::floor(want.m));  // M is an integer
            }
      }
    }
}

// head dim x GQA ratio x scale mode x causal
using ForwardParam = test::AccuracyShape;
class ReferenceForwardAccuracy : public ::testing::TestWithParam<ForwardParam> {};

TEST_P(ReferenceForwardAccuracy, AgainstFloat64) {
  const auto [dim, ratio, mode, causal] = GetParam();
  const int heads_kv = 2;
  const Problem p =
      make_problem({1, 17, 0, 113, 64}, heads_kv * ratio, heads_kv, dim, causal, mode);
  const Inputs in = make_inputs(p, {uint64_t(dim * 100 + ratio * 10 + int(causal))});
  const ForwardResult f = forward(p, in);
  const Float64Result r = float64_attention(p, in, false);
  ASSERT_TRUE(test::all_finite(f.o));
  ASSERT_TRUE(test::all_finite(f.lse));
  const double err = rel_l2(f.o, r.o);
  const double err_bf16 = rel_l2(f.o_bf16.to_float(), r.o);
  RecordProperty("rel_l2_o", std::to_string(err));
  EXPECT_LT(err, kMaxForwardError);
  EXPECT_GT(err, kMinForwardError);
  EXPECT_LT(err_bf16, kMaxForwardError);
  EXPECT_LT(test::max_abs_diff(f.lse, r.lse), kMaxLseError);
  for (size_t row = 0; row < f.lse.size(); ++row) {
    const float m = f.softmax_stats[row * 2], l = f.softmax_stats[row * 2 + 1];
    EXPECT_EQ(m, std::floor(m));
    EXPECT_GT(l, 0.0f);  // every row sees a key here
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReferenceForwardAccuracy, test::accuracy_shapes(),
                         test::accuracy_shape_name);

// Tokens [begin, end) of a tensor as a tensor of their own.
HostTensor token_slice(const HostTensor& t, int begin, int end) {
  HostTensor out(end - begin, t.heads, t.dim);
  std::copy(t.bits.begin() + t.index(begin, 0, 0), t.bits.begin() + t.index(end, 0, 0),
            out.bits.begin());
  return out;
}

// A causal sliding window of W keys: row i's results are those of the last row of the document
// made of its window's tokens alone. Exact scales depend on a token alone, so the contract's O,
// LSE and {M, l} are bitwise equal; float64 O and dQ (which sum over the row's keys only) equal
// to rounding.
TEST(ReferenceForward, SlidingWindowIsAttentionOverTheWindowsKeys) {
  for (int window : {1, 17, 100}) {
    Problem p = make_problem({40, 300}, 4, 2, 64, true, ScaleMode::kExact);
    p.sliding_window = window;
    const Inputs in = make_inputs(p, {uint64_t(window)});
    const ForwardResult f = forward(p, in);
    const Float64Result exact = float64_attention(p, in, true);
    for (int i = 40; i < 340; i += 23) {
      const int begin = std::max(40, i - window + 1), end = i + 1;
      Problem sub = make_problem({end - begin}, 4, 2, 64, true, ScaleMode::kExact);
      const Inputs sub_in{token_slice(in.q, begin, end), token_slice(in.k, begin, end),
                          token_slice(in.v, begin, end), token_slice(in.d_o, begin, end)};
      const ForwardResult fs = forward(sub, sub_in);
      const Float64Result es = float64_attention(sub, sub_in, true);
      const int last = end - begin - 1;
      for (int h = 0; h < p.heads_q; ++h) {
        ASSERT_EQ(f.lse[size_t(h) * p.total_q() + i], fs.lse[size_t(h) * sub.total_q() + last]);
        ASSERT_EQ(f.softmax_stats[(size_t(h) * p.total_q() + i) * 2 + 1],
                  fs.softmax_stats[(size_t(h) * sub.total_q() + last) * 2 + 1]);
        for (int d = 0; d < p.head_dim; ++d) {
          const size_t at = (size_t(i) * p.heads_q + h) * p.head_dim + d;
          const size_t sub_at = (size_t(last) * p.heads_q + h) * p.head_dim + d;
          ASSERT_EQ(f.o[at], fs.o[sub_at]) << "window " << window << " row " << i;
          EXPECT_NEAR(exact.o[at], es.o[sub_at], 1e-12);
          EXPECT_NEAR(exact.dq[at], es.dq[sub_at], 1e-9);
        }
      }
    }
  }
}

// A window as long as every document changes nothing, bit for bit.
TEST(ReferenceForward, WindowCoveringTheDocumentsChangesNothing) {
  Problem p = make_problem({1, 17, 0, 113, 64}, 4, 2, 128, true, ScaleMode::kBlock32);
  const Inputs in = make_inputs(p, {5});
  const ForwardResult plain = forward(p, in);
  p.sliding_window = 113;
  const ForwardResult windowed = forward(p, in);
  EXPECT_EQ(plain.o, windowed.o);
  EXPECT_EQ(plain.lse, windowed.lse);
  EXPECT_EQ(plain.softmax_stats, windowed.softmax_stats);
  p.sliding_window = 112;
  EXPECT_NE(plain.o, forward(p, in).o) << "the test can fail";
}

TEST(ReferenceForward, GqaUsesKvHeadHOverGroupSize) {
  // 4 query heads on 2 KV heads must equal 4 query heads on 4 KV heads where KV head h holds
  // a copy of KV head h / 2.
  const Problem gqa = make_problem({17, 40}, 4, 2, 64, true);
  const Inputs in = make_inputs(gqa, {41});
  Problem mha = gqa;
  mha.heads_kv = 4;
  Inputs expanded = in;
  expanded.k = HostTensor(in.k.tokens, 4, 64);
  expanded.v = HostTensor(in.v.tokens, 4, 64);
  for (int t = 0; t < in.k.tokens; ++t)
    for (int h = 0; h < 4; ++h)
      for (int d = 0; d < 64; ++d) {
        expanded.k.bits[expanded.k.index(t, h, d)] = in.k.bits[in.k.index(t, h / 2, d)];
        expanded.v.bits[expanded.v.index(t, h, d)] = in.v.bits[in.v.index(t, h / 2, d)];
      }
  const ForwardResult a = forward(gqa, in), b = forward(mha, expanded);
  EXPECT_TRUE(test::bitwise_equal(a.o, b.o));
  EXPECT_TRUE(test::bitwise_equal(a.lse, b.lse));
}

TEST(ReferenceForward, FullyMaskedRowsAreZeroWithMinusInfLse) {
  Problem p = make_problem({3, 5, 2}, 2, 1, 64, false);
  p.cu_seqlens_k = {0, 4, 4, 9};  // the second document has queries but no keys
  const Inputs in = make_inputs(p, {42});
  const ForwardResult f = forward(p, in);
  const Float64Result r = float64_attention(p, in, false);
  for (int h = 0; h < p.heads_q; ++h)
    for (int i = 0; i < p.total_q(); ++i) {
      const bool masked = i >= 3 && i < 8;
      const size_t row = size_t(h) * p.total_q() + i;
      if (masked) {
        EXPECT_TRUE(std::isinf(f.lse[row]) && f.lse[row] < 0);
        EXPECT_TRUE(std::isinf(r.lse[row]) && r.lse[row] < 0);
        EXPECT_EQ(f.softmax_stats[row * 2], 0.0f);
        EXPECT_EQ(f.softmax_stats[row * 2 + 1], 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(f.lse[row]));
      }
      for (int d = 0; d < p.head_dim; ++d) {
        const float o = f.o[(size_t(i) * p.heads_q + h) * p.head_dim + d];
        EXPECT_TRUE(std::isfinite(o));
        if (masked) {
          EXPECT_EQ(o, 0.0f);
        }
      }
    }
}

TEST(ReferenceForward, RejectsWhatTheContractDoesNotDefine) {
  Problem p = make_problem({3, 5}, 2, 1, 64, true);
  const Inputs in = make_inputs(p, {43});
  Problem unequal = p;
  unequal.cu_seqlens_k = {0, 4, 8};  // causal with unequal q/k lengths: unsupported
  EXPECT_THROW(forward(unequal, in), std::invalid_argument);
  Problem heads = p;
  heads.heads_q = 3;
  heads.heads_kv = 2;
  EXPECT_THROW(validate(heads), std::invalid_argument);
  Problem decreasing = p;
  decreasing.cu_seqlens_q = decreasing.cu_seqlens_k = {0, 5, 3};
  EXPECT_THROW(validate(decreasing), std::invalid_argument);
  Problem offset = p;
  offset.cu_seqlens_q = offset.cu_seqlens_k = {1, 3, 8};
  EXPECT_THROW(validate(offset), std::invalid_argument);
  Problem window = p;
  window.sliding_window = -1;
  EXPECT_THROW(validate(window), std::invalid_argument);
  window.sliding_window = 4;
  window.causal = false;  // the window is causal
  EXPECT_THROW(validate(window), std::invalid_argument);
}

TEST(ReferenceForward, ResultsDoNotDependOnTheThreadCount) {
  const Problem p = make_problem({1, 17, 113}, 2, 1, 128, true, ScaleMode::kBlock32);
  const Inputs in = make_inputs(p, {44});
  const char* saved = std::getenv("FLAMIA_REF_THREADS");
  const std::string restore = saved ? saved : "";
  setenv("FLAMIA_REF_THREADS", "1", 1);
  const ForwardResult one = forward(p, in);
  const BackwardResult one_b = backward(p, in, one.o_bf16, one.softmax_stats);
  setenv("FLAMIA_REF_THREADS", "5", 1);
  const ForwardResult many = forward(p, in);
  const BackwardResult many_b = backward(p, in, many.o_bf16, many.softmax_stats);
  if (saved)
    setenv("FLAMIA_REF_THREADS", restore.c_str(), 1);
  else
    unsetenv("FLAMIA_REF_THREADS");
  EXPECT_TRUE(test::bitwise_equal(one.o, many.o));
  EXPECT_TRUE(test::bitwise_equal(one.lse, many.lse));
  EXPECT_TRUE(test::bitwise_equal(one_b.dq, many_b.dq));
  EXPECT_TRUE(test::bitwise_equal(one_b.dk, many_b.dk));
  EXPECT_TRUE(test::bitwise_equal(one_b.dv, many_b.dv));
}

TEST(ReferenceForward, KeySmoothingKeepsTheSoftmaxAndCorrectsLse) {
  // With a large common key component, first-key smoothing shrinks |k| and with it the FP8
  // error of S; LSE stays the true log-sum-exp thanks to the shift.
  for (KeySmoothing smoothing : {KeySmoothing::kFirstKey, KeySmoothing::kVector}) {
    Problem p = make_problem({300}, 1, 1, 128, true);
    const Inputs in = make_inputs(p, {45, 6.0f});
    const Float64Result r = float64_attention(p, in, false);
    const ForwardResult plain = forward(p, in);
    p.key_smoothing = smoothing;
    if (smoothing == KeySmoothing::kVector) {
      // A caller-supplied vector: here the mean key (the mechanism, not its causality, is tested).
      p.smoothing_vector.assign(p.head_dim, 0.0f);
      for (int t = 0; t < in.k.tokens; ++t)
        for (int d = 0; d < p.head_dim; ++d)
          p.smoothing_vector[d] += in.k.at(t, 0, d) / in.k.tokens;
    }
    const ForwardResult smoothed = forward(p, in);
    const double plain_err = rel_l2(plain.o, r.o), smoothed_err = rel_l2(smoothed.o, r.o);
    RecordProperty("plain_" + std::to_string(int(smoothing)), std::to_string(plain_err));
    RecordProperty("smoothed_" + std::to_string(int(smoothing)), std::to_string(smoothed_err));
    EXPECT_LT(smoothed_err, 0.6 * plain_err);
    EXPECT_LT(smoothed_err, kMaxForwardError);
    EXPECT_LT(test::max_abs_diff(smoothed.lse, r.lse), kMaxLseError);
  }
}

}  // namespace
}  // namespace flamia::ref
