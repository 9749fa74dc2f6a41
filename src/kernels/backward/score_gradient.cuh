// The per-element work of one (key tile, query tile, head) step on a warpgroup's transposed
// accumulators Sᵀ, dPᵀ (rows = the warpgroup's 64 keys, columns = the tile's 64 queries):
// P̂ rebuilt bit for bit as the forward built it, P = P̂ 2^-ev / l, dS, the power-of-two
// dS scales of dK (per key row) and dQ (per query column), and the accumulator -> A-operand
// packing of P̂ᵀ, Ĥᵀ (FP8) or dSᵀ (BF16).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/tile_factors.cuh"
#include "kernels/common/softmax_numerics.cuh"

namespace flamia::backward {

// Steps 1-2 of numerics §5 in place: s (Sᵀ) becomes p = exp2(t - M + 8), 0 where masked. The t
// and p sequence is the forward's (score_exponent, unnormalized_probability with the saved
// M_i), so e4m3(p) is the forward's P̂.
__device__ __forceinline__ void rebuild_probabilities(float (&s)[kScoreRegisters],
                                                      const KeyRowFactors& key,
                                                      const QueryFactors& qf, int lane) {
#pragma unroll
  for (int i = 0; i < kScoreRegisters; ++i) {
    const int r = register_row(i);
    const int col = register_column(lane, i);
    const float t = score_exponent(s[i], key.score[r].key_scale, qf.row_factor[col],
                                   key.score[r].value_exponent);
    const bool visible = key.visibility[r] <= qf.visibility[col];
    s[i] = visible ? unnormalized_probability(t, qf.offset[col]) : 0.0f;
  }
}

// dPᵀ arrives in two halves of 32 query columns (m64n32 products), so that only half of it is
// live next to p and the dK, dV accumulators.
constexpr int kScoreHalves = 2;
constexpr int kHalfScoreRegisters = kScoreRegisters / kScoreHalves;

// Steps 3-5 for query columns 32 half .. 32 half + 31 (registers 16 half + i of the full tile):
//   FP8:      dP = (dPraw * 2^edo_i) * 2^ev_j
//   BF16grad: dP = dPraw (BF16 dO · V)
//   P = (P̂ * 2^-ev_j) / l_i with P̂ = e4m3(p), the probability the forward's P̂·V̂ used (l_i
//   sums the same P̂), dS = P * (dP - D_i); BF16grad rounds dS to BF16 (the value its products
//   read). Registers 2m, 2m+1 are one row's adjacent columns: one conversion rounds both.
template <bool kBf16Grad, int kHalf>
__device__ __forceinline__ void score_gradient_half(const float (&p)[kScoreRegisters],
                                                    const float (&dp)[kHalfScoreRegisters],
                                                    float (&ds)[kScoreRegisters],
                                                    const KeyRowFactors& key,
                                                    const QueryFactors& qf, int lane) {
#pragma unroll
  for (int k = 0; k < kHalfScoreRegisters; k += 2) {
    const int i0 = kHalf * kHalfScoreRegisters + k;
    const float2 p_hat = round_to_e4m3x2(p[i0], p[i0 + 1]);
    const float p_hat_pair[2] = {p_hat.x, p_hat.y};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int i = i0 + e;
      const int r = register_row(i);
      const int col = register_column(lane, i);
      float dpi = dp[k + e];
      if constexpr (!kBf16Grad)
        dpi = __fmul_rn(__fmul_rn(dpi, qf.d_o_scale[col]), key.value_scale[r]);
      const float prob =
          __fmul_rn(__fmul_rn(p_hat_pair[e], key.score[r].inv_value_scale), qf.inv_l[col]);
      const bool visible = key.visibility[r] <= qf.visibility[col];
      float grad = visible ? __fmul_rn(prob, __fsub_rn(dpi, qf.delta[col])) : 0.0f;
      if constexpr (kBf16Grad) grad = __bfloat162float(__float2bfloat16_rn(grad));
      ds[i] = grad;
    }
  }
}

// Accumulator (m64nN) -> FP8 A operand (N/32 k32 steps x 4 registers), by the register swap of
// hopper-fp8-facts.md: swap registers (8c+2, 8c+3) with (8c+4, 8c+5), pack 4 at a time. A's
// k-slot kk then holds column permuted_token(kk) of each group of 16, the order of the
// permuted token-major copies (dÔ''ᵀ, Q̂ᵀ) used as the B operand.
template <int kRegisters>
__device__ __forceinline__ void accumulator_to_fp8_operand(const float (&x)[kRegisters],
                                                           uint32_t (&a)[kRegisters / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kRegisters / 16; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float* y = &x[16 * kk + 8 * half];
      a[kk][2 * half] = pack_e4m3x4(y[0], y[1], y[4], y[5]);
      a[kk][2 * half + 1] = pack_e4m3x4(y[2], y[3], y[6], y[7]);
    }
  }
}

// The accumulator register whose E4M3 byte lands in byte `b` of register `w` of k step kk of
// accumulator_to_fp8_operand (for the P̂ debug output).
__host__ __device__ constexpr int fp8_operand_source_register(int kk, int w, int b) {
  return 16 * kk + 8 * (w / 2) + 2 * (w % 2) + (b % 2) + 4 * (b / 2);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Accumulator (m64nN) -> BF16 A operand (N/16 k16 steps x 4 registers): for 16-bit types the
// accumulator's fragment of 16 columns is already the A fragment of one k16 step (no
// permutation), two adjacent columns per register, lower column in the low half.
template <int kRegisters>
__device__ __forceinline__ void accumulator_to_bf16_operand(const float (&x)[kRegisters],
                                                            uint32_t (&a)[kRegisters / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kRegisters / 8; ++kk)
#pragma unroll
    for (int w = 0; w < 4; ++w) a[kk][w] = pack_bf16x2(x[8 * kk + 2 * w], x[8 * kk + 2 * w + 1]);
}

// dK's dS operand (numerics §5.8): per key row j, x_ij = dS_ij * 2^eq_i over the tile's 64
// queries, gk_j = scale_exponent(max |x_ij|) (quad shuffles: the 4 lanes of a row), and
// Ĥ = e4m3(x * 2^-gk_j) packed as the A operand of dK += Ĥᵀ Q̂. A row whose amax is 0 (masked,
// or no visible query) keeps its previous exponent: its Ĥ is 0 either way, and the accumulator
// is not rescaled needlessly.
__device__ __forceinline__ void key_gradient_operand(const float (&ds)[kScoreRegisters],
                                                     const QueryFactors& qf, int lane,
                                                     int (&gk)[kRowsPerThread],
                                                     uint32_t (&h)[kScoreRegisters / 16][4]) {
  // Two passes over dS (x recomputed, bit-identical) so that no second 32-register array is
  // live next to dS and the dK, dV accumulators.
  float amax[kRowsPerThread] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kScoreRegisters; ++i) {
    const float x = __fmul_rn(ds[i], qf.q_scale[register_column(lane, i)]);
    amax[register_row(i)] = fmaxf(amax[register_row(i)], fabsf(x));
  }
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 1));
    amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 2));
    if (amax[r] > 0.0f) gk[r] = scale_exponent(amax[r]);
  }
  const float inv_scale[kRowsPerThread] = {exp2_int(-gk[0]), exp2_int(-gk[1])};
  auto h_value = [&](int i) {
    const float x = __fmul_rn(ds[i], qf.q_scale[register_column(lane, i)]);
    return __fmul_rn(x, inv_scale[register_row(i)]);
  };
#pragma unroll
  for (int kk = 0; kk < kScoreRegisters / 16; ++kk)
#pragma unroll
    for (int w = 0; w < 4; ++w)
      h[kk][w] = pack_e4m3x4(h_value(fp8_operand_source_register(kk, w, 0)),
                             h_value(fp8_operand_source_register(kk, w, 1)),
                             h_value(fp8_operand_source_register(kk, w, 2)),
                             h_value(fp8_operand_source_register(kk, w, 3)));
}

// dQ's dS block scale (numerics §5.7), first half: this warp's maximum of |dS_ij * 2^ekc_j| over
// its 16 keys for each of the tile's 64 query columns, into column_amax[warp][col] (lanes 0-3
// write; the shuffles over lane bits 2-4 combine the 8 row groups of the warp).
__device__ __forceinline__ void query_gradient_column_amax(const float (&ds)[kScoreRegisters],
                                                           const KeyRowFactors& key, int lane,
                                                           float* column_amax_of_warp) {
#pragma unroll
  for (int pair = 0; pair < kScoreRegisters / 4; ++pair) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int i0 = 4 * pair + b;  // row 0 of the thread, column 8 pair + 2 (lane & 3) + b
      const int i1 = i0 + 2;        // row 1, same column
      float m = fmaxf(fabsf(__fmul_rn(ds[i0], key.centered_scale[0])),
                      fabsf(__fmul_rn(ds[i1], key.centered_scale[1])));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
      if (lane < 4) column_amax_of_warp[register_column(lane, i0)] = m;
    }
  }
}

// Second half (threads 0..63, after a barrier): gq_i over the CTA's 8 warps = 128 keys.
__device__ __forceinline__ void query_gradient_block_scales(QueryFactors& qf,
                                                            const float (*column_amax)[kBlockM],
                                                            float softmax_scale) {
  const int col = threadIdx.x;
  if (col >= kBlockM) return;
  float amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, column_amax[w][col]);
  const int gq = scale_exponent(amax);
  qf.dq_scale[col] = softmax_scale * exp2_int(gq);
  qf.dq_inv_block_scale[col] = exp2_int(-gq);
}

// Ĝ = e4m3(dS_ij * 2^ekc_j * 2^-gq_i) stored transposed into the dQ A-operand tile
// g[query][key] (128-byte swizzled rows of the tile's 128 keys): the 8-bit transpose through
// shared memory. Each pack converts two keys (the thread's rows r, r + 8) of two queries.
__device__ __forceinline__ void store_query_gradient_operand(const float (&ds)[kScoreRegisters],
                                                             const KeyRowFactors& key,
                                                             const QueryFactors& qf, int lane,
                                                             const int (&tile_row)[kRowsPerThread],
                                                             uint8_t* g) {
#pragma unroll
  for (int pair = 0; pair < kScoreRegisters / 4; ++pair) {
    const int col = register_column(lane, 4 * pair);
    const float inv0 = qf.dq_inv_block_scale[col];
    const float inv1 = qf.dq_inv_block_scale[col + 1];
    // Registers 4 pair + {0, 1, 2, 3} = (row 0, col), (row 0, col + 1), (row 1, col), (row 1, col +
    // 1).
    const float* d = &ds[4 * pair];
    const uint32_t bytes = pack_e4m3x4(__fmul_rn(__fmul_rn(d[0], key.centered_scale[0]), inv0),
                                       __fmul_rn(__fmul_rn(d[2], key.centered_scale[1]), inv0),
                                       __fmul_rn(__fmul_rn(d[1], key.centered_scale[0]), inv1),
                                       __fmul_rn(__fmul_rn(d[3], key.centered_scale[1]), inv1));
    g[hopper::swizzled_offset<kBlockN>(col, tile_row[0])] = uint8_t(bytes);
    g[hopper::swizzled_offset<kBlockN>(col, tile_row[1])] = uint8_t(bytes >> 8);
    g[hopper::swizzled_offset<kBlockN>(col + 1, tile_row[0])] = uint8_t(bytes >> 16);
    g[hopper::swizzled_offset<kBlockN>(col + 1, tile_row[1])] = uint8_t(bytes >> 24);
  }
}

// BF16grad: dS (already BF16-rounded) stored transposed into ds_tile[query][key] (BF16, two
// panels of 64 keys: panel = warpgroup), the A operand of dQ = dS · K.
__device__ __forceinline__ void store_bf16_score_gradient(const float (&ds)[kScoreRegisters],
                                                          int lane,
                                                          const int (&tile_row)[kRowsPerThread],
                                                          uint8_t* ds_tile) {
#pragma unroll
  for (int i = 0; i < kScoreRegisters; ++i) {
    const int key = tile_row[register_row(i)];
    const uint32_t offset =
        uint32_t((key / kBf16PerPanel) * kBlockM * kPanelBytes) +
        hopper::swizzled_offset<kPanelBytes>(register_column(lane, i), (key % kBf16PerPanel) * 2);
    *reinterpret_cast<__nv_bfloat16*>(ds_tile + offset) = __float2bfloat16_rn(ds[i]);
  }
}

}  // namespace flamia::backward
