// The reference backward: the float64 reference against finite differences, the contract's
// formulas re-evaluated independently, accuracy against float64 across shapes, the 2049-token
// document, fully masked rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "reference/attention_internal.h"
#include "reference/attention_ref.h"
#include "ref_test_util.h"

namespace flamia::ref {
namespace {

// Relative L2 error bounds against float64 on N(0,1) data (measured ~0.05-0.08).
constexpr double kMaxGradError = 0.12;
constexpr double kMinGradError = 0.01;  // FP8 must show: far less means it is not applied

// ---- float64 reference against central finite differences -----------------------------------
double loss(const Problem& p, const internal::Float64Inputs& in) {
  const Float64Result r = internal::float64_attention(p, in, false);
  double sum = 0.0;
  for (size_t x = 0; x < r.o.size(); ++x) sum += r.o[x] * in.d_o[x];
  return sum;
}

TEST(Float64Reference, GradientsMatchFiniteDifferences) {
  for (bool causal : {true, false}) {
    const Problem p = make_problem({3, 6}, 2, 1, 16, causal);
    const internal::Float64Inputs in = internal::float64_inputs(make_inputs(p, {51}));
    const Float64Result r = internal::float64_attention(p, in, true);
    constexpr double kStep = 1e-5;
    auto check = [&](std::vector<double> internal::Float64Inputs::*tensor,
                     const std::vector<double>& grad, const char* name) {
      const std::vector<double>& x = in.*tensor;
      for (size_t at = 0; at < x.size(); at += 7) {
        internal::Float64Inputs plus = in, minus = in;
        (plus.*tensor)[at] += kStep;
        (minus.*tensor)[at] -= kStep;
        const double numeric = (loss(p, plus) - loss(p, minus)) / (2 * kStep);
        EXPECT_NEAR(grad[at], numeric, 1e-6 * (1.0 + std::fabs(numeric))) << name << " " << at;
      }
    };
    check(&internal::Float64Inputs::q, r.dq, "dq");
    check(&internal::Float64Inputs::k, r.dk, "dk");
    check(&internal::Float64Inputs::v, r.dv, "dv");
  }
}

// ---- the contract's backward, written out directly ---------------------------------------------
struct NaiveGradients {
  std::vector<double> dq, dk, dv;
};

NaiveGradients naive_backward(const Problem& p, const Inputs& in, const ForwardResult& f) {
  const ForwardOperandsRef fwd = quantize_forward_operands(p, in);
  const BackwardOperandsRef bwd = quantize_backward_operands(p, in, fwd, f.o_bf16, f.softmax_stats);
  const int dim = p.head_dim, total_q = p.total_q();
  const float c = p.softmax_scale * kLog2e;
  const std::vector<TokenBlock> key_blocks = tile_aligned_blocks(p.cu_seqlens_k, 128);
  const std::vector<TokenBlock> query_blocks = tile_aligned_blocks(p.cu_seqlens_q, 64);
  NaiveGradients out{std::vector<double>(size_t(total_q) * p.heads_q * dim, 0.0),
                     std::vector<double>(size_t(p.total_k()) * p.heads_kv * dim, 0.0),
                     std::vector<double>(size_t(p.total_k()) * p.heads_kv * dim, 0.0)};
  auto dec = [](uint8_t code) { return double(e4m3_decode(code)); };
  for (int h = 0; h < p.heads_q; ++h) {
    const int g = p.kv_head(h);
    for (int b = 0; b < p.batch(); ++b) {
      const int q0 = p.cu_seqlens_q[b], q1 = p.cu_seqlens_q[b + 1];
      const int k0 = p.cu_seqlens_k[b], k1 = p.cu_seqlens_k[b + 1];
      auto visible = [&](int i, int j) { return !p.causal || j - k0 <= i - q0; };
      std::vector<std::vector<float>> ds(q1 - q0, std::vector<float>(k1 - k0, 0.0f));
      std::vector<std::vector<uint8_t>> p_hat(q1 - q0, std::vector<uint8_t>(k1 - k0, 0));
      for (int i = q0; i < q1; ++i) {
        const float m = f.softmax_stats[(size_t(h) * total_q + i) * 2];
        const float l = f.softmax_stats[(size_t(h) * total_q + i) * 2 + 1];
        for (int j = k0; j < k1; ++j) {
          if (!visible(i, j)) continue;
          double s = 0.0, dp = 0.0;
          for (int d = 0; d < dim; ++d) {
            s += dec(fwd.q.value(i, h, d)) * dec(fwd.k.value(j, g, d));
            dp += dec(bwd.d_o.value(i, h, d)) * dec(fwd.v.value(j, g, d));
          }
          const int ev = fwd.v.exponent(j, g);
          const float row_factor = c * exp2_int(fwd.q.exponent(i, h));
          const float key_scale = exp2_int(fwd.k.exponent(j, g));
          const bool static_scales = p.scale_mode == ScaleMode::kStatic;
          const float factor =
              static_scales ? static_row_factor(row_factor, key_scale) : row_factor * key_scale;
          const float e = static_scales  // numerics §4, static: the offset inside the fma
                              ? exp2f(std::fmaf(float(s), factor, float(ev) - (m - 8.0f)))
                              : exp2f(std::fmaf(float(s), factor, float(ev)) - m + 8.0f);
          p_hat[i - q0][j - k0] = e4m3_encode(e);
          const float prob = e4m3_decode(p_hat[i - q0][j - k0]) * exp2_int(-ev) / l;
          const float dpij = float(dp) * exp2_int(bwd.d_o.exponent(i, h)) * exp2_int(ev);
          ds[i - q0][j - k0] = prob * (dpij - bwd.delta[size_t(h) * total_q + i]);
        }
      }
      for (int i = q0; i < q1; ++i)  // dQ: G per (row, 128-key block) through K̂c
        for (const TokenBlock& blk : key_blocks) {
          if (blk.begin < k0 || blk.end > k1) continue;
          float amax = 0.0f;
          for (int j = blk.begin; j < blk.end; ++j)
            amax = std::max(
                amax, std::fabs(ds[i - q0][j - k0] * exp2_int(bwd.k_centered.exponent(j, g))));
          const int gq = scale_exponent(amax);
          for (int d = 0; d < dim; ++d) {
            double sum = 0.0;
            for (int j = blk.begin; j < blk.end; ++j)
              sum += dec(quantize_e4m3(ds[i - q0][j - k0] * exp2_int(bwd.k_centered.exponent(j, g)),
                                       gq)) *
                     dec(bwd.k_centered.value(j, g, d));
            out.dq[(size_t(i) * p.heads_q + h) * dim + d] += p.softmax_scale * std::ldexp(sum, gq);
          }
        }
      for (int j = k0; j < k1; ++j) {
        for (const TokenBlock& blk : query_blocks) {  // dK: H per (key row, 64-query block)
          if (blk.begin < q0 || blk.end > q1) continue;
          float amax = 0.0f;
          for (int i = blk.begin; i < blk.end; ++i)
            amax = std::max(amax, std::fabs(ds[i - q0][j - k0] * exp2_int(fwd.q.exponent(i, h))));
          const int gk = scale_exponent(amax);
          for (int d = 0; d < dim; ++d) {
            double sum = 0.0;
            for (int i = blk.begin; i < blk.end; ++i)
              sum += dec(quantize_e4m3(ds[i - q0][j - k0] * exp2_int(fwd.q.exponent(i, h)), gk)) *
                     dec(fwd.q.value(i, h, d));
            out.dk[(size_t(j) * p.heads_kv + g) * dim + d] += p.softmax_scale * std::ldexp(sum, gk);
          }
        }
        for (int d = 0; d < dim; ++d) {  // dV through P̂ and dÔ''
          double sum = 0.0;
          for (int i = q0; i < q1; ++i)
            sum += dec(p_hat[i - q0][j - k0]) *
                   std::ldexp(dec(bwd.d_o_scaled.value(i, h, d)), bwd.d_o_scaled.exponent(i, h));
          out.dv[(size_t(j) * p.heads_kv + g) * dim + d] += std::ldexp(sum, -fwd.v.exponent(j, g));
        }
      }
    }
  }
  return out;
}

TEST(ReferenceBackward, MatchesTheContractWrittenOut) {
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32, ScaleMode::kStatic})
    for (bool causal : {true, false}) {
      // Documents long enough for several 64-query and 128-key blocks, starting off the grid.
      const Problem p = make_problem({1, 21, 0, 150}, 4, 2, 64, causal, mode);
      const Inputs in = make_inputs(p, {52, 2.0f});
      const ForwardResult f = forward(p, in);
      const BackwardResult got = backward(p, in, f.o_bf16, f.softmax_stats);
      const NaiveGradients want = naive_backward(p, in, f);
      // Same terms, summation orders that may differ: agreement to FP32 rounding.
      EXPECT_LT(rel_l2(got.dq, want.dq), 1e-6);
      EXPECT_LT(rel_l2(got.dk, want.dk), 1e-6);
      EXPECT_LT(rel_l2(got.dv, want.dv), 1e-6);
      EXPECT_GT(rel_l2(got.dq, std::vector<double>(want.dq.size(), 0.0)), 0.5);  // not all zero
    }
}

// ---- accuracy against float64
// --------------------------------------------------------------------
using BackwardParam = test::AccuracyShape;
class ReferenceBackwardAccuracy : public ::testing::TestWithParam<BackwardParam> {};

TEST_P(ReferenceBackwardAccuracy, AgainstFloat64) {
  const auto [dim, ratio, mode, causal] = GetParam();
  const int heads_kv = 1;
  const Problem p =
      make_problem({1, 17, 0, 113, 64}, heads_kv * ratio, heads_kv, dim, causal, mode);
  const Inputs in = make_inputs(p, {uint64_t(7 + dim + ratio + 2 * int(causal))});
  const ForwardResult f = forward(p, in);
  const Float64Result r = float64_attention(p, in, true);
  for (BackwardPrecision precision : {BackwardPrecision::kFp8, BackwardPrecision::kFp8Bf16Grad}) {
    const BackwardResult g = backward(p, in, f.o_bf16, f.softmax_stats, precision);
    ASSERT_TRUE(test::all_finite(g.dq) && test::all_finite(g.dk) && test::all_finite(g.dv));
    const double dq = rel_l2(g.dq, r.dq), dk = rel_l2(g.dk, r.dk), dv = rel_l2(g.dv, r.dv);
    const std::string tag = precision == BackwardPrecision::kFp8 ? "fp8" : "bf16grad";
    RecordProperty(tag + "_dq", std::to_string(dq));
    RecordProperty(tag + "_dk", std::to_string(dk));
    RecordProperty(tag + "_dv", std::to_string(dv));
    for (double err : {dq, dk, dv}) {
      EXPECT_LT(err, kMaxGradError) << tag;
      EXPECT_GT(err, kMinGradError) << tag;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReferenceBackwardAccuracy, test::accuracy_shapes(),
                         test::accuracy_shape_name);

TEST(ReferenceBackward, LongDocumentOneHead) {
  const Problem p = make_problem({2049}, 1, 1, 128, true);
  const Inputs in = make_inputs(p, {53});
  const ForwardResult f = forward(p, in);
  const BackwardResult g = backward(p, in, f.o_bf16, f.softmax_stats);
  const Float64Result r = float64_attention(p, in, true);
  const double o = rel_l2(f.o, r.o), dq = rel_l2(g.dq, r.dq), dk = rel_l2(g.dk, r.dk),
               dv = rel_l2(g.dv, r.dv);
  RecordProperty("o", std::to_string(o));
  RecordProperty("dq", std::to_string(dq));
  RecordProperty("dk", std::to_string(dk));
  RecordProperty("dv", std::to_string(dv));
  EXPECT_LT(o, 0.08);
  EXPECT_LT(dq, kMaxGradError);
  EXPECT_LT(dk, kMaxGradError);
  EXPECT_LT(dv, kMaxGradError);
}

TEST(ReferenceBackward, FullyMaskedRowsAndKeysWithoutQueries) {
  Problem p = make_problem({3, 5, 2}, 2, 1, 64, false);
  p.cu_seqlens_k = {0, 4, 4, 9};  // doc 1: queries, no keys
  p.cu_seqlens_q = {0, 3, 8, 8};  // doc 2: keys, no queries
  const Inputs in = make_inputs(p, {54});
  const ForwardResult f = forward(p, in);
  for (BackwardPrecision precision : {BackwardPrecision::kFp8, BackwardPrecision::kFp8Bf16Grad}) {
    const BackwardResult g = backward(p, in, f.o_bf16, f.softmax_stats, precision);
    ASSERT_TRUE(test::all_finite(g.dq) && test::all_finite(g.dk) && test::all_finite(g.dv));
    for (int i = 3; i < 8; ++i)
      for (int h = 0; h < p.heads_q; ++h)
        for (int d = 0; d < p.head_dim; ++d)
          EXPECT_EQ(g.dq[(size_t(i) * p.heads_q + h) * p.head_dim + d], 0.0f);
    for (int j = 4; j < 9; ++j)
      for (int d = 0; d < p.head_dim; ++d) {
        EXPECT_EQ(g.dk[size_t(j) * p.head_dim + d], 0.0f);
        EXPECT_EQ(g.dv[size_t(j) * p.head_dim + d], 0.0f);
      }
  }
  const Float64Result r = float64_attention(p, in, true);
  EXPECT_TRUE(test::all_finite(r.dq) && test::all_finite(r.dk) && test::all_finite(r.dv));
}

}  // namespace
}  // namespace flamia::ref
