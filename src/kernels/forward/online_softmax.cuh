// Online softmax of one consumer thread's two query rows over a key tile, with the integer
// running offset of docs/numerics.md §4: t = fma(S, (c 2^eq) 2^ek, ev), M = ceil(running max t),
// p = exp2(t - M + 8) (scale mode kStatic: exp2(fma(S, f, ev - M + 8))), P̂ = e4m3(p),
// l += Σ P̂ 2^-ev (from the P̂·V̂ MMA). Rescales of l and O are exact powers of two.
#pragma once

#include "kernels/common/softmax_numerics.cuh"
#include "kernels/forward/forward_config.h"
#include "kernels/forward/document_packing.h"

namespace flamia::forward {

constexpr int kRowsPerThread = 2;  // accumulator rows lane/4 and lane/4 + 8 of the warp's 16

struct RowState {
  float row_max[kRowsPerThread];     // M_i (integer value) or -inf before any visible key
  float row_sum[kRowsPerThread];     // l_i (the whole row's, the same in the row's quad)
  float row_factor[kRowsPerThread];  // c * 2^eq_i
};

// Accumulator register i of a thread holds row (i >> 1) & 1 of its pair, column pair (i >> 2),
// column (i & 1) within the pair.
__device__ __forceinline__ int register_row(int i) {
  return (i >> 1) & 1;
}

// 2^(old_max - new_max) for integer-valued maxima, branch-free: 1 when the maximum did not move
// (also while both are -inf), 0 when `old_max` is -inf (nothing accumulated yet) or the ratio
// underflows.
__device__ __forceinline__ float power_of_two_ratio(float old_max, float new_max) {
  const int difference = int(fmaxf(old_max - new_max, float(kMinScaleExponent - 1)));
  const float ratio = difference < kMinScaleExponent ? 0.0f : exp2_int(difference);
  return old_max == new_max ? 1.0f : ratio;
}

// Which keys a tile's softmax masks: none (every key inside the document is visible; keys
// outside have ev = -inf), the causal diagonal (keys after the row), or each row's own key range
// (segments of packed documents: the row's document, causal or not).
enum class KeyMask { kNone, kCausal, kRowRange };

// Column group c (8 keys) of a tile takes exp2_polynomial instead of the MUFU when every > 0 and
// c % every == every - 1.
__host__ __device__ constexpr bool uses_exp2_polynomial(int c, int every) {
  return every > 0 && c % every == every - 1;
}

// The row's new integer maximum from `m`, the thread's part of max_j t_ij: the quad's maximum,
// M = max(M, ceil(m)), l rescaled here (`ratio`, old/new, rescales the O accumulator in the
// caller once the MMA in flight on it has completed). Returns the new offset M - 8
// (softmax_offset).
__device__ __forceinline__ float advance_row_max(RowState& state, int row, float& ratio, float m) {
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
  const float new_max = fmaxf(state.row_max[row], ceilf(m));
  ratio = power_of_two_ratio(state.row_max[row], new_max);
  state.row_sum[row] *= ratio;
  state.row_max[row] = new_max;
  return softmax_offset(new_max);
}

// The second half of a row's online softmax, once its t are in s and `m` is the thread's part
// of their maximum: the new maximum (advance_row_max), then t -> p = exp2(t - M + 8) in place.
template <int kBlockN, int kRow, int kPolynomialEvery>
__device__ __forceinline__ void exponentiate_row(float (&s)[kBlockN / 2], RowState& state,
                                                 float& ratio, float m) {
  const float offset = advance_row_max(state, kRow, ratio, m);
#pragma unroll
  for (int c = 0; c < kBlockN / 8; ++c) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 4 * c + 2 * kRow + h;
      if (uses_exp2_polynomial(c, kPolynomialEvery))
        s[i] = unnormalized_probability_polynomial(s[i], offset);
      else
        s[i] = unnormalized_probability(s[i], offset);
    }
  }
}

// One accumulator row of the thread over a key tile: scores -> t, the new integer row maximum
// (l rescaled here; `ratio`, old/new, rescales the O accumulator in the caller once the MMA in
// flight on it has completed), then t -> p = exp2(t - M + 8) in place. No branch splits a
// tile's softmax into separately scheduled blocks (the max update used to be one): ptxas then
// schedules both rows' work together, which made the forward kernel 4-7% faster at head dim 128
// (session 8). Per row, because loading the factors again per row costs fewer registers than
// keeping both rows' chains over one load (three consumers at head dim 64 fit only this way).
// `keys`: the row's visible keys relative to k_start (kCausal reads only `last`).
// kPolynomialEvery: which column groups take exp2_polynomial (uses_exp2_polynomial; 0: none).
template <int kBlockN, KeyMask kMask, int kRow, int kPolynomialEvery = 0>
__device__ __forceinline__ void softmax_row(float (&s)[kBlockN / 2], RowState& state, float& ratio,
                                            const KeyPairFactors* factors, int lane,
                                            int first_key_local, const RowKeyRange& keys) {
  // Key column col (tile-relative) is key first_key_local + 2*(lane&3) + col_off: masked when
  // the compile-time offset col_off lies outside [lower, upper] of the row.
  const int upper = keys.last - first_key_local - 2 * (lane & 3);
  const int lower = keys.first - first_key_local - 2 * (lane & 3);
  // two interleaved max chains over the row's kBlockN / 4 values (halves the dependency depth)
  float m_even = -INFINITY, m_odd = -INFINITY;
#pragma unroll
  for (int c = 0; c < kBlockN / 8; ++c) {
    // one 16-byte shared load: {sk0, sk1, ev0, ev1} of this thread's column pair (the record's
    // first half; KeyPairFactors is 32-byte aligned)
    const float4 kv = *reinterpret_cast<const float4*>(&factors[4 * c + (lane & 3)]);
    const float key_scale[2] = {kv.x, kv.y};
    const float value_exponent[2] = {kv.z, kv.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 4 * c + 2 * kRow + h;  // register_row(i) == kRow
      float t = score_exponent(s[i], key_scale[h], state.row_factor[kRow], value_exponent[h]);
      const int col_off = 8 * c + h;
      if constexpr (kMask != KeyMask::kNone) {
        if (col_off > upper) t = -INFINITY;
      }
      if constexpr (kMask == KeyMask::kRowRange) {
        if (col_off < lower) t = -INFINITY;
      }
      s[i] = t;
      if (h == 0) m_even = fmaxf(m_even, t);
      if (h == 1) m_odd = fmaxf(m_odd, t);
    }
  }
  exponentiate_row<kBlockN, kRow, kPolynomialEvery>(s, state, ratio, fmaxf(m_even, m_odd));
}

// Scale mode kStatic's softmax of both rows of the thread, whose keys share one K and one V
// exponent per head (numerics §4, static): with the row factor f = static_row_factor (formed
// once per row and tile) and the head's ev, M = ceil(fma(max_j S_ij, f, ev)) and p =
// exp2(fma(S, f, ev - (M - 8))): per score one max, one FFMA and one exponential, no per-key
// factor read. Keys outside the document are masked by the rows' key ranges in the tiles that
// hold any (S = -inf; the per-key path masks them by ev = -inf instead): kRowRange (segments)
// by each row's [first, last], kCausal by each row's last and the document's first key (row
// ranges from 0; tile-relative keys < 0 lie before the document).
template <int kBlockN, KeyMask kMask, int kPolynomialEvery = 0>
__device__ __forceinline__ void static_softmax_rows(float (&s)[kBlockN / 2], RowState& state,
                                                    float (&ratio)[kRowsPerThread],
                                                    const float (&row_factor)[kRowsPerThread],
                                                    float value_exponent, int lane,
                                                    int first_key_local,
                                                    const RowKeyRange (&keys)[kRowsPerThread]) {
  float m[kRowsPerThread][2];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) m[r][0] = m[r][1] = -INFINITY;
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i) {
    const int r = register_row(i), h = i & 1;
    if constexpr (kMask != KeyMask::kNone) {
      const int col_off = 8 * (i >> 2) + h;
      const int upper = keys[r].last - first_key_local - 2 * (lane & 3);
      const int lower =
          (kMask == KeyMask::kRowRange ? keys[r].first : 0) - first_key_local - 2 * (lane & 3);
      if (col_off > upper || col_off < lower) s[i] = -INFINITY;
    }
    m[r][h] = fmaxf(m[r][h], s[i]);
  }
  float bias[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    // fma is monotone in S for f > 0: the maximum of t is the t of the maximum S.
    const float max_t = __fmaf_rn(fmaxf(m[r][0], m[r][1]), row_factor[r], value_exponent);
    bias[r] = static_exponent_bias(value_exponent, advance_row_max(state, r, ratio[r], max_t));
  }
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i) {
    const int r = register_row(i);
    if (uses_exp2_polynomial(i >> 2, kPolynomialEvery))
      s[i] = exp2_polynomial(static_exponent_argument(s[i], row_factor[r], bias[r]));
    else
      s[i] = static_unnormalized_probability(s[i], row_factor[r], bias[r]);
  }
}

// Scores of a key tile -> probabilities p (in place), both rows of the thread; `ratio`: each
// row's old/new maximum ratio for the O accumulator. `rows`: each row's visible keys.
template <int kBlockN, KeyMask kMask, int kPolynomialEvery = 0>
__device__ __forceinline__ void softmax_scores_to_probabilities(
    float (&s)[kBlockN / 2], RowState& state, float (&ratio)[kRowsPerThread],
    const KeyPairFactors* factors, int lane, int first_key_local,
    const RowKeyRange (&rows)[kRowsPerThread]) {
  static_assert(kRowsPerThread == 2, "rows 0 and 1");
  softmax_row<kBlockN, kMask, 0, kPolynomialEvery>(s, state, ratio[0], factors, lane,
                                                   first_key_local, rows[0]);
  softmax_row<kBlockN, kMask, 1, kPolynomialEvery>(s, state, ratio[1], factors, lane,
                                                   first_key_local, rows[1]);
}

// The same for scale mode kStatic (static_softmax_rows): the rows' factors static_row_factor of
// c 2^eq and the head's key scale, the head's value exponent, and each row's keys within the
// document.
template <int kBlockN, KeyMask kMask, int kPolynomialEvery = 0>
__device__ __forceinline__ void static_scores_to_probabilities(
    float (&s)[kBlockN / 2], RowState& state, float (&ratio)[kRowsPerThread], float key_scale,
    float value_exponent, int lane, int first_key_local,
    const RowKeyRange (&rows)[kRowsPerThread]) {
  static_assert(kRowsPerThread == 2, "rows 0 and 1");
  const float row_factor[kRowsPerThread] = {static_row_factor(state.row_factor[0], key_scale),
                                            static_row_factor(state.row_factor[1], key_scale)};
  static_softmax_rows<kBlockN, kMask, kPolynomialEvery>(s, state, ratio, row_factor, value_exponent,
                                                        lane, first_key_local, rows);
}

template <int kRegisters>
__device__ __forceinline__ void rescale_output(float (&o)[kRegisters],
                                               const float (&ratio)[kRowsPerThread]) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    if (ratio[r] != 1.0f) {
#pragma unroll
      for (int i = 0; i < kRegisters; ++i)
        if (register_row(i) == r) o[i] *= ratio[r];
    }
  }
}

// Accumulator -> FP8 A operand of P̂·V̂ (4 x b32 per k32 step): swap registers (8c+2, 8c+3) with
// (8c+4, 8c+5) and pack 4 at a time; the A operand's k order is then the permuted token order
// in which the quantize pass stores V̂ᵀ.
template <int kBlockN>
__device__ __forceinline__ void probabilities_to_operand(const float (&s)[kBlockN / 2],
                                                         uint32_t (&a)[kBlockN / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float* x = &s[16 * kk + 8 * half];
      a[kk][2 * half] = pack_e4m3x4(x[0], x[1], x[4], x[5]);
      a[kk][2 * half + 1] = pack_e4m3x4(x[2], x[3], x[6], x[7]);
    }
  }
}

// l of a tile (numerics §4 step 5: the denominator sums the probabilities the P̂·V̂ product
// uses, so O is their exact weighted mean and the backward's dS rows sum to zero) comes from the
// P̂·V̂ MMA itself: its row-sum columns hold Σ_j P̂_ij 2^(ev_ref - ev_j), in every column and so in
// every thread of the row's quad. Keys whose 2^(ev_ref - ev_j) E4M3 cannot hold (rare: a value
// exponent more than 8 binades from the tile's reference key) are summed here instead, in FP32,
// from the packed operand, and added to l before the tile's MMA part (the quad's sum, the same in
// its four lanes). Word 2h of k step kk holds row 0's columns of pairs 4kk+2h (bytes 0-1) and
// 4kk+2h+1 (bytes 2-3); word 2h+1 the same columns of row 1.
template <int kBlockN>
__device__ __forceinline__ void add_fallback_row_sums(const uint32_t (&a)[kBlockN / 32][4],
                                                      const KeyPairFactors* factors, int lane,
                                                      RowState& state) {
  float sum[kRowsPerThread][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // two chains per row
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int pair = 4 * kk + 2 * half;
      const float2 inv0 =
          *reinterpret_cast<const float2*>(factors[4 * pair + (lane & 3)].fallback_inv_value_scale);
      const float2 inv1 = *reinterpret_cast<const float2*>(
          factors[4 * (pair + 1) + (lane & 3)].fallback_inv_value_scale);
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        const uint32_t word = a[kk][2 * half + r];
        const float2 lo = unpack_e4m3x2(uint16_t(word & 0xffffu));
        const float2 hi = unpack_e4m3x2(uint16_t(word >> 16));
        sum[r][0] = __fmaf_rn(lo.x, inv0.x, sum[r][0]);
        sum[r][1] = __fmaf_rn(lo.y, inv0.y, sum[r][1]);
        sum[r][0] = __fmaf_rn(hi.x, inv1.x, sum[r][0]);
        sum[r][1] = __fmaf_rn(hi.y, inv1.y, sum[r][1]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    float x = __fadd_rn(sum[r][0], sum[r][1]);
    x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 1));  // the same sum in all four lanes
    x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 2));
    state.row_sum[r] = __fadd_rn(state.row_sum[r], x);
  }
}

// After the P̂·V̂ MMA of a tile: l += (row-sum column) * 2^-ev_ref (exact: a power of two).
// Accumulator register kOutRegisters + 2r lies in the row-sum columns of row r.
template <int kOutRegisters, int kRegisters>
__device__ __forceinline__ void add_tile_row_sums(RowState& state, const float (&acc)[kRegisters],
                                                  float reference_inv_value_scale) {
  static_assert(kRegisters >= kOutRegisters + 2 * kRowsPerThread, "row-sum registers");
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r)
    state.row_sum[r] =
        __fmaf_rn(acc[kOutRegisters + 2 * r], reference_inv_value_scale, state.row_sum[r]);
}

}  // namespace flamia::forward
