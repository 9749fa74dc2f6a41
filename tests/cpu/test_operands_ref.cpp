// The quantized copies of the forward and the backward (numerics §3): key smoothing, the LSE
// shift, K̂c, dÔ'' blocks and D, and the token-major layouts.
#include <gtest/gtest.h>

#include <cmath>

#include "reference/attention_ref.h"
#include "ref_test_util.h"

namespace flamia::ref {
namespace {

Problem small_problem(ScaleMode mode) {
  Problem p = make_problem({1, 17, 0, 40}, 4, 2, 64, true, mode);
  return p;
}

TEST(ForwardOperands, RowMajorCopiesMatchQuantize) {
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
    const Problem p = small_problem(mode);
    const Inputs in = make_inputs(p, {21});
    const ForwardOperandsRef ops = quantize_forward_operands(p, in);
    const Fp8Tensor v = quantize([&](int t, int g, int d) { return in.v.at(t, g, d); }, p.total_k(),
                                 p.heads_kv, p.head_dim, scale_blocks(p.cu_seqlens_k, mode));
    EXPECT_EQ(ops.v.values, v.values);
    EXPECT_EQ(ops.v.exponents, v.exponents);
    EXPECT_EQ(ops.v_t, token_major(v, true));
    EXPECT_TRUE(ops.lse_shift.empty());  // no smoothing
  }
}

TEST(ForwardOperands, FirstKeySmoothingZeroesEachDocumentsFirstKey) {
  Problem p = small_problem(ScaleMode::kExact);
  p.key_smoothing = KeySmoothing::kFirstKey;
  const Inputs in = make_inputs(p, {22, 4.0f});
  const ForwardOperandsRef ops = quantize_forward_operands(p, in);
  for (int b = 0; b < p.batch(); ++b) {
    const int first = p.cu_seqlens_k[b];
    for (int t = first; t < p.cu_seqlens_k[b + 1]; ++t)
      for (int g = 0; g < p.heads_kv; ++g) {
        float amax = 0.0f;
        for (int d = 0; d < p.head_dim; ++d)
          amax = std::max(amax, std::fabs(in.k.at(t, g, d) - in.k.at(first, g, d)));
        ASSERT_EQ(ops.k.exponent(t, g), scale_exponent(amax));
        for (int d = 0; d < p.head_dim; ++d) {
          const float x = in.k.at(t, g, d) - in.k.at(first, g, d);  // one FP32 subtraction
          ASSERT_EQ(ops.k.value(t, g, d), quantize_e4m3(x, ops.k.exponent(t, g)));
          if (t == first) {
            ASSERT_EQ(ops.k.value(t, g, d), 0);
          }
        }
      }
  }
  // LSE shift = softmax_scale * (q . k_first(doc)).
  ASSERT_EQ(ops.lse_shift.size(), size_t(p.heads_q) * p.total_q());
  for (int b = 0; b < p.batch(); ++b)
    for (int i = p.cu_seqlens_q[b]; i < p.cu_seqlens_q[b + 1]; ++i)
      for (int h = 0; h < p.heads_q; ++h) {
        double dot = 0.0;
        for (int d = 0; d < p.head_dim; ++d)
          dot += double(in.q.at(i, h, d)) * in.k.at(p.cu_seqlens_k[b], p.kv_head(h), d);
        EXPECT_NEAR(ops.lse_shift[size_t(h) * p.total_q() + i], p.softmax_scale * dot,
                    1e-5 * (1.0 + std::fabs(dot)));
      }
}

TEST(ForwardOperands, VectorSmoothingSubtractsTheVector) {
  Problem p = small_problem(ScaleMode::kBlock32);
  p.key_smoothing = KeySmoothing::kVector;
  p.smoothing_vector.assign(size_t(p.heads_kv) * p.head_dim, 0.0f);
  for (size_t i = 0; i < p.smoothing_vector.size(); ++i)
    p.smoothing_vector[i] = 0.25f * float(i % 7) - 0.5f;
  const Inputs in = make_inputs(p, {23});
  const ForwardOperandsRef ops = quantize_forward_operands(p, in);
  const Fp8Tensor want = quantize(
      [&](int t, int g, int d) {
        return in.k.at(t, g, d) - p.smoothing_vector[size_t(g) * p.head_dim + d];
      },
      p.total_k(), p.heads_kv, p.head_dim, scale_blocks(p.cu_seqlens_k, p.scale_mode));
  EXPECT_EQ(ops.k.values, want.values);
  EXPECT_EQ(ops.k.exponents, want.exponents);
  EXPECT_EQ(ops.lse_shift.size(), size_t(p.heads_q) * p.total_q());
  Problem bad = p;
  bad.smoothing_vector.pop_back();
  EXPECT_THROW(quantize_forward_operands(bad, in), std::invalid_argument);
}

TEST(BackwardOperands, CopiesFollowTheContract) {
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
    const Problem p = make_problem({1, 17, 0, 113}, 2, 1, 64, true, mode);
    const Inputs in = make_inputs(p, {24, 3.0f});
    const ForwardResult f = forward(p, in);
    const ForwardOperandsRef fwd = quantize_forward_operands(p, in);
    const BackwardOperandsRef bwd =
        quantize_backward_operands(p, in, fwd, f.o_bf16, f.softmax_stats);
    EXPECT_EQ(bwd.q_t, token_major(fwd.q, true));

    // K̂c from k - k_first(doc), scale_mode blocks, natural token order.
    const Fp8Tensor kc = quantize(
        [&](int t, int g, int d) {
          int b = 0;
          while (p.cu_seqlens_k[b + 1] <= t) ++b;
          return in.k.at(t, g, d) - in.k.at(p.cu_seqlens_k[b], g, d);
        },
        p.total_k(), p.heads_kv, p.head_dim, scale_blocks(p.cu_seqlens_k, mode));
    EXPECT_EQ(bwd.k_centered.values, kc.values);
    EXPECT_EQ(bwd.k_centered.exponents, kc.exponents);
    EXPECT_EQ(bwd.k_centered_t, token_major(kc, false));

    // dÔ: scale_mode blocks.
    const Fp8Tensor d_o =
        quantize([&](int t, int h, int d) { return in.d_o.at(t, h, d); }, p.total_q(), p.heads_q,
                 p.head_dim, scale_blocks(p.cu_seqlens_q, mode));
    EXPECT_EQ(bwd.d_o.values, d_o.values);
    EXPECT_EQ(bwd.d_o.exponents, d_o.exponents);

    // dÔ'' = q8((dO * fl(1/l)) * 2^-ew), ew per 64-query tile-aligned block, permuted
    // token-major (l > 0 here).
    const Fp8Tensor d_o_scaled = quantize(
        [&](int t, int h, int d) {
          const float l = f.softmax_stats[(size_t(h) * p.total_q() + t) * 2 + 1];
          return in.d_o.at(t, h, d) * (1.0f / l);
        },
        p.total_q(), p.heads_q, p.head_dim,
        tile_aligned_blocks(p.cu_seqlens_q, kDoScaledBlockTokens));
    EXPECT_EQ(bwd.d_o_scaled.values, d_o_scaled.values);
    EXPECT_EQ(bwd.d_o_scaled.exponents, d_o_scaled.exponents);
    EXPECT_EQ(bwd.d_o_scaled_t, token_major(d_o_scaled, true));

    // D_i = 2^edo_i * (dÔ_i . O_i) with the BF16 O.
    for (int t = 0; t < p.total_q(); ++t)
      for (int h = 0; h < p.heads_q; ++h) {
        double dot = 0.0;
        for (int d = 0; d < p.head_dim; ++d)
          dot += double(e4m3_decode(d_o.value(t, h, d))) * f.o_bf16.at(t, h, d);
        EXPECT_EQ(bwd.delta[size_t(h) * p.total_q() + t],
                  float(dot) * exp2_int(d_o.exponent(t, h)));
      }
  }
}

TEST(BackwardOperands, FullyMaskedRowsGetZeroScaledGradient) {
  Problem p = make_problem({3, 5}, 1, 1, 64, false);
  p.cu_seqlens_k = {0, 4, 4};  // the second document has no keys
  const Inputs in = make_inputs(p, {25});
  const ForwardResult f = forward(p, in);
  const ForwardOperandsRef fwd = quantize_forward_operands(p, in);
  const BackwardOperandsRef bwd = quantize_backward_operands(p, in, fwd, f.o_bf16, f.softmax_stats);
  for (int t = 3; t < 8; ++t)
    for (int d = 0; d < p.head_dim; ++d) EXPECT_EQ(bwd.d_o_scaled.value(t, 0, d), 0);
  EXPECT_TRUE(test::all_finite(bwd.delta));
}

}  // namespace
}  // namespace flamia::ref
