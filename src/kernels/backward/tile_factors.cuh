// Per-key (register) and per-query (shared memory) factors of one (key tile, query tile, head)
// step: the scales, offsets and masks of docs/numerics.md §4-§5 in the transposed orientation
// of the backward (keys are accumulator rows, queries are columns).
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/hopper/async_copy.cuh"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_params.h"
#include "kernels/backward/tile_geometry.cuh"
#include "kernels/common/softmax_numerics.cuh"

namespace flamia::backward {

// Accumulator rows per thread in an m64nN wgmma: lane/4 and lane/4 + 8 of the warp's 16.
constexpr int kRowsPerThread = 2;

// Register i of an accumulator holds row register_row(i) of the thread's pair and column
// 8 (i >> 2) + 2 (lane & 3) + (i & 1).
__host__ __device__ constexpr int register_row(int i) {
  return (i >> 1) & 1;
}
__host__ __device__ constexpr int register_column_offset(int i) {
  return 8 * (i >> 2) + (i & 1);
}
__device__ __forceinline__ int register_column(int lane, int i) {
  return register_column_offset(i) + 2 * (lane & 3);
}

// The two key rows a thread owns: scales of the forward's score (key_column_factors, shared
// with the forward; its ev_j also sets dV's final scale) and the visibility index. (K̂c's scales:
// the dQ warpgroup's table, dq_warpgroup.cuh.)
struct KeyRowFactors {
  KeyColumnFactors score[kRowsPerThread];  // {2^ek, ev, 2^-ev}
  int visibility[kRowsPerThread];
  uint32_t window;  // of visible_pair: visibility_window (packed runs, sliding windows)
};

__device__ __forceinline__ KeyRowFactors load_key_factors(const BackwardParams& p,
                                                          const KeyTileItem& item,
                                                          const int (&tile_row)[kRowsPerThread],
                                                          int window) {
  KeyRowFactors f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int j = item.key0 + tile_row[r];
    f.visibility[r] = key_visibility_index(item.span, j, p.causal != 0);
    const bool valid = f.visibility[r] != kKeyOutside;
    const int64_t at = int64_t(item.kv_head) * p.total_k + j;
    const int ek = valid ? p.k_exp[at] : 0;
    const int ev = valid ? p.v_exp[at] : 0;
    f.score[r] = key_column_factors(ek, ev);
  }
  f.window = visibility_window(item.packed, p.causal != 0, window);
  return f;
}

// A packed run's key visibility indices (packed_key_from_query), once its first step's query
// factors have landed: a run lies in one 64-token window from key0 = q0, so a key inside it is
// query row tile_row (< kBlockM) of that step, whose packed query index the factors hold.
template <typename Factors>
__device__ __forceinline__ void set_packed_key_visibility(KeyRowFactors& f, const Factors& qf,
                                                          const int (&tile_row)[kRowsPerThread],
                                                          bool causal) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r)
    if (f.visibility[r] != kKeyOutside)
      f.visibility[r] = packed_key_from_query(qf.visibility[tile_row[r]], causal);
}

// BF16grad's per-query factors of one 64-query tile of one head, in shared memory (the FP8
// path's: Fp8QueryFactors below). A thread's accumulator columns come in adjacent pairs
// (col, col + 1), col even: where registers allow, it reads a factor of both columns with one
// 8-byte load (column_pair).
struct QueryFactors {
  float row_factor[kBlockM];         // c * 2^eq_i, the forward's row factor (kStaticScales: f_i)
  float offset[kBlockM];             // M_i - 8 (softmax_offset of the saved M_i; static: ev - it)
  float probability_scale[kBlockM];  // 1 / l_i
  float d_o_scale[kBlockM];          // 2^edo_i
  float delta[kBlockM];              // D_i (copied as is by cp.async)
  float2 softmax_stats[kBlockM];     // {M_i, l_i} as saved (cp.async staging for the above)
  int visibility[kBlockM];           // query_visibility_index
  float dq_scale[kBlockM];           // BF16grad: softmax_scale (the FP8 dQ: dq_warpgroup.cuh)
  int value_block_exp;               // ew of the tile: one dO'' exponent per 64-query block
};

// The FP8 path's query factors of one step: the same values per query row, but computed once
// per (query head, token) before the kernel (row_factors.cu) and loaded with the step's query
// tiles by TMA (one box of kRowFactorFields rows of kBlockM FP32 words: the fields in this
// order), so that the key warpgroups fetch and compute nothing per step. visibility is the
// token's own document's index (query_visibility_index); in tiles that straddle the CTA's
// document the rows outside it are set to kQueryOutside after the copy (finish_query_tiles).
// value_block_exp: the row's block exponent ew of dÔ'' (one per 64-query block of a document).
//
// The FP8 path works on x_ij = dS_ij * 2^eq_i rather than dS_ij (numerics §5.8's dK operand
// needs x; §5.7's dQ operand is x * 2^ekc_j * 2^-(gq_i + eq_i)): 2^eq_i rides in the gradient
// factors and 2^-eq_i in dQ's block scale, so no multiply per element is spent on it. The
// gradient factors are those of score_gradient_half's form of x: {2^(eq_i + edo_i) / l_i,
// (2^eq_i / l_i) D_i} (kStaticScales: D_i 2^-ev in place of D_i).
enum GradientFactor : int {
  kGradientScale = 0,  // a_i = 2^(eq_i + edo_i) / l_i
  kScaledDelta = 1,    // b_i = (2^eq_i / l_i) D_i
  kGradientFactors,
};
struct Fp8QueryFactors {
  float row_factor[kBlockM];  // kStaticScales: f_i (fold_static_exponents)
  float offset[kBlockM];      // kStaticScales: ev - (M_i - 8)
  float gradient_factor[kGradientFactors][kBlockM];
  int visibility[kBlockM];
  int value_block_exp[kBlockM];
};
constexpr int kRowFactorFields = sizeof(Fp8QueryFactors) / (kBlockM * sizeof(float));
static_assert(sizeof(Fp8QueryFactors) == kRowFactorFields * kBlockM * sizeof(float),
              "the TMA box: kRowFactorFields rows of kBlockM words");

// The per-row values both paths compute from the saved statistics and exponents (the FP8
// path's row_factors.cu, BF16grad's QueryFactorFetch::store): bit for bit the same.
struct RowFactorValues {
  float row_factor, offset, probability_scale, d_o_scale;
};
template <bool kBf16Grad>
__device__ __forceinline__ RowFactorValues row_factor_values(float scale_log2, int eq, int edo,
                                                             float2 stats /* {M, l} */) {
  RowFactorValues v;
  v.row_factor = query_row_factor(scale_log2, eq);
  v.offset = softmax_offset(stats.x);
  // A valid row always has l > 0 when it sees a key (its own diagonal key at least); rows with
  // l = 0 see no key, so every element is masked and the value is never used.
  const float inv_l = stats.y > 0.0f ? 1.0f / stats.y : 0.0f;
  v.probability_scale = kBf16Grad ? inv_l : __fmul_rn(inv_l, exp2_int(eq));
  v.d_o_scale = exp2_int(edo);
  return v;
}

// Scale mode kStatic (numerics §4, static; p.static_key_exp set): the row's KV head shares one
// ek and one ev, so the query factors fold them once per row: row_factor becomes
// static_row_factor(c 2^eq_i, 2^ek) and offset the row's bias ev - (M_i - 8), which
// backward_kernel<..., kStaticScales> reads as static_unnormalized_probability's. The same
// values in both paths (row_factors.cu, QueryFactorFetch::store).
__device__ __forceinline__ void fold_static_exponents(RowFactorValues& v, const BackwardParams& p,
                                                      int kv_head) {
  if (p.static_key_exp == nullptr) return;
  const int ek = static_scale_exponent(p.static_key_exp[kv_head]);
  const int ev = static_scale_exponent(p.static_value_exp[kv_head]);
  v.row_factor = static_row_factor(v.row_factor, exp2_int(ek));
  v.offset = static_exponent_bias(float(ev), v.offset);
}

// The softmax offset M_i - 8 that a query factor's `offset` field stands for (the P̂ debug
// hook): the field itself, or under kStaticScales ev - bias.
template <bool kStaticScales>
__device__ __forceinline__ int softmax_offset_of(float offset_field, float value_exponent) {
  return kStaticScales ? int(value_exponent) - int(offset_field) : int(offset_field);
}

// Factors of columns (col, col + 1), col even.
__device__ __forceinline__ float2 column_pair(const float (&factor)[kBlockM], int col) {
  return *reinterpret_cast<const float2*>(&factor[col]);
}
__device__ __forceinline__ int2 column_pair(const int (&factor)[kBlockM], int col) {
  return *reinterpret_cast<const int2*>(&factor[col]);
}

// The global inputs of one step's QueryFactors, fetched a step ahead by threads 0..kBlockM-1
// (query row q0 + thread of head h) and turned into QueryFactors after the current step, so
// that their latency hides behind the current step's work. The FP32 inputs (M, l, D) travel by
// cp.async straight into the step's QueryFactors (D is final as loaded; M, l are staged); the
// three 8-bit exponents wait in one packed register. store() computes exactly what a one-phase
// load computes (invalid rows: every input 0).
struct QueryFactorFetch {
  uint32_t exponents;  // bytes: eq_i, edo_i, ew of the tile (thread 0 only)

  static constexpr int kQueryExpShift = 0;
  static constexpr int kDoExpShift = 8;
  static constexpr int kBlockExpShift = 16;
  static constexpr uint32_t kByteMask = 0xFFu;

  __device__ __forceinline__ static uint32_t pack(int e, int shift) {
    return (uint32_t(e) & kByteMask) << shift;
  }
  __device__ __forceinline__ int unpack(int shift) const {
    return int(int8_t(uint8_t((exponents >> shift) & kByteMask)));
  }

  // Issues the copies into `f` (the caller commits them) and the exponent loads.
  __device__ __forceinline__ void fetch(QueryFactors& f, const BackwardParams& p,
                                        const KeyTileItem& item, int head, int q0) {
    const int t = threadIdx.x;
    if (t >= kBlockM) return;
    const int i = q0 + t;
    const bool valid = query_visibility_index(item.span, i, p.causal != 0) != kQueryOutside;
    const int64_t at = valid ? int64_t(head) * p.total_q + i : 0;
    hopper::async_copy_small<sizeof(float2)>(&f.softmax_stats[t], p.softmax_stats + 2 * at, valid);
    hopper::async_copy_small<sizeof(float)>(&f.delta[t], p.delta + at, valid);
    exponents = pack(valid ? p.q_exp[at] : 0, kQueryExpShift) |
                pack(valid ? p.d_o_exp[at] : 0, kDoExpShift);
    if (t == 0) {
      // dO'' scale blocks are [floor16(q_start) + 64 m, ...) ∩ document: the tile's own range.
      const int first_valid = max(q0, item.span.q_start);
      exponents |= pack(p.d_o_scaled_exp[int64_t(head) * p.total_q + first_valid], kBlockExpShift);
    }
  }

  // After async_copy_wait_all() (this thread's copies of `f` have landed).
  __device__ __forceinline__ void store(QueryFactors& f, const BackwardParams& p,
                                        const KeyTileItem& item, int q0) const {
    const int t = threadIdx.x;
    if (t >= kBlockM) return;
    RowFactorValues v = row_factor_values</*kBf16Grad=*/true>(
        p.scale_log2, unpack(kQueryExpShift), unpack(kDoExpShift), f.softmax_stats[t]);
    fold_static_exponents(v, p, item.kv_head);
    f.row_factor[t] = v.row_factor;
    f.offset[t] = v.offset;
    f.probability_scale[t] = v.probability_scale;
    f.d_o_scale[t] = v.d_o_scale;
    f.visibility[t] = query_visibility_index(item.span, q0 + t, p.causal != 0);
    f.dq_scale[t] = p.softmax_scale;
    if (t == 0) f.value_block_exp = unpack(kBlockExpShift);
  }
};

// 2^e for any integer e, clamped to FP32's normal powers of two: an exact rescale factor as
// long as accumulated units stay within 2^±126 of each other.
__device__ __forceinline__ float power_of_two(int e) {
  return exp2_int(min(max(e, kMinScaleExponent), kMaxScaleExponent));
}

}  // namespace flamia::backward
