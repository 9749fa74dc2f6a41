// The per-element work of one (key tile, query tile, head) step on a warpgroup's transposed
// accumulators Sᵀ, dPᵀ (rows = the warpgroup's 64 keys, columns = the tile's 64 queries):
// P̂ rebuilt bit for bit as the forward built it, P = P̂ 2^-ev / l, dS, the power-of-two
// dS scale of dK (per key row), and the accumulator -> A-operand packing of P̂ᵀ, Ĥᵀ (FP8) or
// dSᵀ (BF16). dQ's scale and operand: dq_warpgroup.cuh (FP8), dq_accumulate.cuh (BF16grad).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/tile_factors.cuh"
#include "kernels/common/softmax_numerics.cuh"

namespace flamia::backward {

// Register i of a thread's Sᵀ / dPᵀ accumulator: group i / 4 covers columns (col, col + 1) of
// column_of_group and the thread's two rows: i % 4 = {0: (row 0, col), 1: (row 0, col + 1),
// 2: (row 1, col), 3: (row 1, col + 1)} (register_row / register_column).
constexpr int kRegistersPerGroup = 4;
__device__ __forceinline__ int column_of_group(int group, int lane) {
  return register_column(lane, kRegistersPerGroup * group);
}

// Steps 1-2 of numerics §5 in place: s (Sᵀ) becomes p = exp2(t - M + 8), 0 where masked. The t
// and p sequence is the forward's (score_exponent, unnormalized_probability with the saved
// M_i), so e4m3(p) is the forward's P̂. kMasked = false: every pair of the step is visible
// (unmasked_query_tiles), so no mask is evaluated.
// kPairLoads: each factor of the group's two columns in one 8-byte load (the BF16grad kernel
// spills with them, so it loads per element). kStaticScales: scale mode kStatic's form, p =
// exp2(fma(S, f_i, ev - (M_i - 8))) with both per-row values in the query factors
// (fold_static_exponents): one FFMA and one exponential, no key factor read. kLoadFence > 0:
// the warp syncs before column group kLoadFence, so that ptxas cannot hoist the later groups'
// factor loads above it (kRebuildLoadFence; the lanes are converged here).
template <bool kStaticScales, bool kMasked, bool kPairLoads, int kLoadFence = 0, typename Factors>
__device__ __forceinline__ void rebuild_probabilities(float (&s)[kScoreRegisters],
                                                      const KeyRowFactors& key, const Factors& qf,
                                                      int lane) {
#pragma unroll
  for (int group = 0; group < kScoreRegisters / kRegistersPerGroup; ++group) {
    if constexpr (kLoadFence > 0) {
      if (group == kLoadFence) __syncwarp();
    }
    const int col = column_of_group(group, lane);
    float2 row_factor{}, offset{};
    if constexpr (kPairLoads) {
      row_factor = column_pair(qf.row_factor, col);
      offset = column_pair(qf.offset, col);
    }
#pragma unroll
    for (int e = 0; e < kRegistersPerGroup; ++e) {
      const int i = kRegistersPerGroup * group + e;
      const int r = register_row(i);
      const bool odd = (e & 1) != 0;
      const float column_row_factor =
          kPairLoads ? (odd ? row_factor.y : row_factor.x) : qf.row_factor[col + odd];
      const float column_offset = kPairLoads ? (odd ? offset.y : offset.x) : qf.offset[col + odd];
      float probability;
      if constexpr (kStaticScales) {
        probability = static_unnormalized_probability(s[i], column_row_factor, column_offset);
      } else {
        const float t = score_exponent(s[i], key.score[r].key_scale, column_row_factor,
                                       key.score[r].value_exponent);
        probability = unnormalized_probability(t, column_offset);
      }
      const bool visible =
          !kMasked || visible_pair(key.visibility[r], qf.visibility[col + odd], key.window);
      s[i] = visible ? probability : 0.0f;
    }
  }
}

// dPᵀ arrives in two halves of 32 query columns (m64n32 products), so that only half of it is
// live next to p and the dK, dV accumulators.
constexpr int kScoreHalves = 2;
constexpr int kHalfScoreRegisters = kScoreRegisters / kScoreHalves;

// Steps 3-5 for query columns 32 half .. 32 half + 31 (registers 16 half + i of the full tile),
// with P̂ = e4m3(p), the probability the forward's P̂·V̂ used (l_i sums the same P̂):
//   FP8:      x = dS * 2^eq_i (Fp8QueryFactors) as
//             x = fma(dPraw, a_i, -(b_i * 2^-ev_j)) * P̂,  a_i = 2^(eq_i + edo_i) / l_i,
//                                                        b_i = (2^eq_i / l_i) * D_i,
//             3 operations per element (kStaticScales: 2, b_i holds 2^-ev already). That is
//             2^eq_i * P * (dP - D_i) with P = (P̂ 2^-ev_j) / l_i and dP = (dPraw 2^edo_i)
//             2^ev_j, the powers of two cancelling or riding along exactly, and 1/l_i moved
//             into the per-query b_i: one rounding per query away from the reference's
//             (P̂ (2^eq_i / l_i)) fma(dPraw, 2^edo_i, -(D_i 2^-ev_j)) (numerics §5 step 5 bounds
//             the difference: 4 FP32 units of |x| + |P̂ b_i 2^-ev_j| in FP32's normal range).
//   BF16grad: dS = ((P̂ * 2^-ev_j) / l_i) * (dPraw - D_i) (BF16 dO · V), rounded to BF16 (the
//             value its products read).
// Registers 2m, 2m+1 are one row's adjacent columns: one conversion rounds both. Its two bytes
// also go into `p_hat_operand`, k step kHalf of P̂ᵀ as dV's A operand: the accumulator -> FP8
// operand register swap of hopper-fp8-facts.md, where word 2h + r holds row r's bytes of groups
// 2h (low half) and 2h + 1 (high half) of the k step's four. (Packing P̂ from the conversions
// done here, rather than converting p again, saves two conversions per four elements.)
template <bool kBf16Grad, int kHalf, bool kMasked, bool kStaticScales, typename Factors>
__device__ __forceinline__ void score_gradient_half(const float (&p)[kScoreRegisters],
                                                    const float (&dp)[kHalfScoreRegisters],
                                                    float (&ds)[kScoreRegisters],
                                                    uint32_t (&p_hat_operand)[4],
                                                    const KeyRowFactors& key, const Factors& qf,
                                                    int lane) {
  static_assert(kHalfScoreRegisters == 16, "one k32 step of the P̂ᵀ operand per half");
  constexpr int kGroupsPerHalf = kHalfScoreRegisters / kRegistersPerGroup;
#pragma unroll
  for (int g = 0; g < kGroupsPerHalf; ++g) {
    const int group = kHalf * kGroupsPerHalf + g;
    const int col = column_of_group(group, lane);
    float2 gradient_scale{}, scaled_delta{};  // a_i, b_i
    if constexpr (!kBf16Grad) {
      gradient_scale = column_pair(qf.gradient_factor[kGradientScale], col);
      scaled_delta = column_pair(qf.gradient_factor[kScaledDelta], col);
    }
    const int2 visibility = kMasked ? column_pair(qf.visibility, col) : make_int2(0, 0);
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int i0 = kRegistersPerGroup * group + 2 * r;  // (row r, col), (row r, col + 1)
      const uint16_t p_hat_bytes = encode_e4m3x2(p[i0], p[i0 + 1]);
      const float2 p_hat = unpack_e4m3x2(p_hat_bytes);
      uint32_t& word = p_hat_operand[2 * (g / 2) + r];
      word = (g & 1) ? word | (uint32_t(p_hat_bytes) << 16) : uint32_t(p_hat_bytes);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = i0 + e;
        const float p_hat_e = e ? p_hat.y : p_hat.x;
        const float dp_raw = dp[i - kHalf * kHalfScoreRegisters];
        float grad;
        if constexpr (kBf16Grad) {
          // (per-element factor loads: the BF16grad kernel has no registers for the pairs)
          const float prob = __fmul_rn(__fmul_rn(p_hat_e, key.score[r].inv_value_scale),
                                       qf.probability_scale[col + e]);
          grad = __fmul_rn(prob, __fsub_rn(dp_raw, qf.delta[col + e]));
          grad = __bfloat162float(__float2bfloat16_rn(grad));
        } else {
          const float b = e ? scaled_delta.y : scaled_delta.x;
          const float shifted_delta =
              kStaticScales ? b : __fmul_rn(b, key.score[r].inv_value_scale);
          grad = __fmul_rn(
              __fmaf_rn(dp_raw, e ? gradient_scale.y : gradient_scale.x, -shifted_delta), p_hat_e);
        }
        const bool visible = !kMasked || visible_pair(key.visibility[r],
                                                      e ? visibility.y : visibility.x, key.window);
        ds[i] = visible ? grad : 0.0f;
      }
    }
  }
}

// The accumulator register whose E4M3 byte lands in byte `b` of register `w` of k step kk of an
// FP8 A operand packed from an accumulator (hopper-fp8-facts.md's register swap; P̂ᵀ in
// score_gradient_half, Ĥ in key_gradient_operand, the P̂ debug output).
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

// dK's dS operand (numerics §5.8) from x = dS * 2^eq (score_gradient_half): per key row j,
// gk_j = scale_exponent(max_i |x_ij|) over the tile's 64 queries (quad shuffles: the 4 lanes of a
// row), and Ĥ = e4m3(x * 2^-gk_j) packed as the A operand of dK += Ĥᵀ Q̂. A row whose amax is 0
// (masked, or no visible query) keeps its previous exponent: its Ĥ is 0 either way, and the
// accumulator is not rescaled needlessly.
__device__ __forceinline__ void key_gradient_operand(const float (&x)[kScoreRegisters],
                                                     int (&gk)[kRowsPerThread],
                                                     uint32_t (&h)[kScoreRegisters / 16][4]) {
  float amax[kRowsPerThread] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kScoreRegisters; ++i)
    amax[register_row(i)] = fmaxf(amax[register_row(i)], fabsf(x[i]));
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 1));
    amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 2));
    // (a select, not a branch: ptxas branches around the rule for the ternary)
    const int rule = scale_exponent_branch_free(amax[r]);
    asm("{\n .reg .pred take;\n setp.gt.f32 take, %2, 0f00000000;\n"
        " selp.s32 %0, %1, %0, take;\n}\n"
        : "+r"(gk[r])
        : "r"(rule), "f"(amax[r]));
  }
  const float inv_scale[kRowsPerThread] = {exp2_int(-gk[0]), exp2_int(-gk[1])};
  auto h_value = [&](int i) { return __fmul_rn(x[i], inv_scale[register_row(i)]); };
#pragma unroll
  for (int kk = 0; kk < kScoreRegisters / 16; ++kk)
#pragma unroll
    for (int w = 0; w < 4; ++w)
      h[kk][w] = pack_e4m3x4(h_value(fp8_operand_source_register(kk, w, 0)),
                             h_value(fp8_operand_source_register(kk, w, 1)),
                             h_value(fp8_operand_source_register(kk, w, 2)),
                             h_value(fp8_operand_source_register(kk, w, 3)));
}

// BF16grad: dS (already BF16-rounded, packed in pairs of queries as dK's A operand `a`, see
// accumulator_to_bf16_operand) stored as it sits in the accumulator, ds_tile[key][query]: one
// 128-byte swizzled row of the tile's 64 queries per key, 4 bytes (two queries) per store. dQ =
// dS · K reads it M-major (queries contiguous), so no transpose is needed.
__device__ __forceinline__ void store_bf16_score_gradient(
    const uint32_t (&a)[kScoreRegisters / 8][4], int lane, const int (&tile_row)[kRowsPerThread],
    uint8_t* ds_tile) {
  static_assert(kBlockM * 2 == kPanelBytes, "one swizzled row holds a key's 64 queries");
#pragma unroll
  for (int kk = 0; kk < kScoreRegisters / 8; ++kk) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int i = 8 * kk + 2 * w;  // registers i, i + 1: one row, two adjacent queries
      const int key = tile_row[register_row(i)];
      const uint32_t offset =
          hopper::swizzled_offset<kPanelBytes>(key, register_column(lane, i) * 2);
      *reinterpret_cast<uint32_t*>(ds_tile + offset) = a[kk][w];
    }
  }
}

}  // namespace flamia::backward
