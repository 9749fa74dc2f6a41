// The per-element softmax arithmetic of docs/numerics.md §4, in the one operation sequence the
// forward and the backward both use, so the backward rebuilds the forward's P̂ bit for bit.
// Explicit _rn intrinsics: no contraction or reassociation may change a bit between the passes.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "common/fp8_numerics.h"

namespace flamia {

// Per-key factors of one key column (numerics §4 step 2 and 5).
struct KeyColumnFactors {
  float key_scale;        // 2^ek_j
  float value_exponent;   // ev_j, an integer value
  float inv_value_scale;  // 2^-ev_j
};

__device__ __forceinline__ KeyColumnFactors key_column_factors(int key_exp, int value_exp) {
  return {exp2_int(key_exp), float(value_exp), exp2_int(-value_exp)};
}

// Row factor of query i: c * 2^eq_i with c = softmax_scale * log2(e).
__device__ __forceinline__ float query_row_factor(float scale_log2, int query_exp) {
  return __fmul_rn(scale_log2, exp2_int(query_exp));
}

// t_ij = fma(S_ij * 2^ek_j, c * 2^eq_i, ev_j)
__device__ __forceinline__ float score_exponent(float s, float key_scale, float row_factor,
                                                float value_exponent) {
  return __fmaf_rn(__fmul_rn(s, key_scale), row_factor, value_exponent);
}

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The row offset subtracted before exp2: M_i - 8, or 0 while the row has seen no key (so that
// masked -inf scores give 0, never NaN).
__device__ __forceinline__ float softmax_offset(float row_max_integer) {
  return row_max_integer == -INFINITY ? 0.0f : row_max_integer - float(kSoftmaxOffset);
}

// exp2(t - offset): the unnormalized probability before E4M3 rounding.
__device__ __forceinline__ float unnormalized_probability(float t, float offset) {
  return ex2_approx(__fsub_rn(t, offset));
}

// Packs 4 floats into 4 E4M3 bytes (x0 in the lowest byte), RNE satfinite.
__device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(lo) : "f"(x0), "f"(x1));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(hi) : "f"(x2), "f"(x3));
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// The two E4M3 bytes of `bits` (low byte first) as exact floats.
__device__ __forceinline__ float2 unpack_e4m3x2(uint16_t bits) {
  uint32_t halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(halves) : "h"(bits));
  return __half22float2(*reinterpret_cast<const __half2*>(&halves));
}

// (e4m3(x0), e4m3(x1)) as floats: the P̂ values pack_e4m3x4 stores, by the same conversion.
__device__ __forceinline__ float2 round_to_e4m3x2(float x0, float x1) {
  uint16_t bits;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(bits) : "f"(x0), "f"(x1));
  return unpack_e4m3x2(bits);
}

}  // namespace flamia
