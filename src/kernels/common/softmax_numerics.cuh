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

// t_ij = fma(S_ij, (c * 2^eq_i) * 2^ek_j, ev_j): the key scale folds into the row factor (an
// exact power-of-two product, rounded once in FP32 only where it leaves the normal range), so a
// kernel whose keys share one exponent (scale mode kStatic) forms the factor once per row.
__device__ __forceinline__ float score_exponent(float s, float key_scale, float row_factor,
                                                float value_exponent) {
  return __fmaf_rn(s, __fmul_rn(row_factor, key_scale), value_exponent);
}

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// exp2 on the FMA pipe instead of the MUFU, whose rate at head dim 128 equals the FP8 tensor
// cores' per score (forward_config.h, kPolynomialExpEvery): 2^x = 2^n * p(f), n = round(x),
// f = x - n in [-0.5, 0.5], p a degree-5 minimax polynomial (relative error ~2e-7 in FP32, as
// close to 2^x as ex2.approx's 2^-22: the two round to different E4M3 values for ~1e-6 of
// inputs, numerics §4). x is clamped to [-16, inf) with NaN kept (max.NaN): masked scores (-inf)
// give 2^-16, which E4M3 rounds to 0; NaN stays NaN through the final multiply.
constexpr float kPolynomialMinExponent = -16.0f;
constexpr float kRoundingShift =
    12582912.0f;  // 1.5 * 2^23: x + shift holds round(x) in its low bits
// p(f) = 1 + f (c1 + f (c2 + f (c3 + f (c4 + f c5))))
constexpr float kExp2C1 = 0.6931470036506653f;
constexpr float kExp2C2 = 0.24022242426872253f;
constexpr float kExp2C3 = 0.05550733953714371f;
constexpr float kExp2C4 = 0.009671512991189957f;
constexpr float kExp2C5 = 0.0013264697045087814f;

__device__ __forceinline__ float max_keep_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

__device__ __forceinline__ float exp2_polynomial(float x) {
  x = max_keep_nan(x, kPolynomialMinExponent);
  const float shifted = __fadd_rn(x, kRoundingShift);
  const float f = __fsub_rn(x, __fsub_rn(shifted, kRoundingShift));
  float p = __fmaf_rn(kExp2C5, f, kExp2C4);
  p = __fmaf_rn(p, f, kExp2C3);
  p = __fmaf_rn(p, f, kExp2C2);
  p = __fmaf_rn(p, f, kExp2C1);
  p = __fmaf_rn(p, f, 1.0f);
  // 2^n from the shifted float's low bits: (bits << 23) keeps n's low 9 bits in the exponent
  // field (the shift constant's own low 9 bits are 0); + 127 << 23 is the bias.
  const float scale = __int_as_float((__float_as_int(shifted) << 23) + (127 << 23));
  return __fmul_rn(p, scale);
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

// The same through exp2_polynomial.
__device__ __forceinline__ float unnormalized_probability_polynomial(float t, float offset) {
  return exp2_polynomial(__fsub_rn(t, offset));
}

// Scale mode kStatic's exp2 argument and probability (numerics §4, static): the score, the
// row factor f_i and the row's bias ev - (M_i - 8) (static_exponent_bias) in one FFMA.
__device__ __forceinline__ float static_exponent_argument(float s, float row_factor, float bias) {
  return __fmaf_rn(s, row_factor, bias);
}
__device__ __forceinline__ float static_unnormalized_probability(float s, float row_factor,
                                                                 float bias) {
  return ex2_approx(static_exponent_argument(s, row_factor, bias));
}
__device__ __forceinline__ float static_exponent_bias(float value_exponent, float offset) {
  return __fsub_rn(value_exponent, offset);
}

// The E4M3 bytes of (x0, x1), x0 in the low byte, RNE satfinite.
__device__ __forceinline__ uint16_t encode_e4m3x2(float x0, float x1) {
  uint16_t bits;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(bits) : "f"(x0), "f"(x1));
  return bits;
}

// Packs 4 floats into 4 E4M3 bytes (x0 in the lowest byte), RNE satfinite.
__device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  return uint32_t(encode_e4m3x2(x0, x1)) | (uint32_t(encode_e4m3x2(x2, x3)) << 16);
}

// The two E4M3 bytes of `bits` (low byte first) as exact floats.
__device__ __forceinline__ float2 unpack_e4m3x2(uint16_t bits) {
  uint32_t halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(halves) : "h"(bits));
  return __half22float2(*reinterpret_cast<const __half2*>(&halves));
}

// (e4m3(x0), e4m3(x1)) as floats: the P̂ values pack_e4m3x4 stores, by the same conversion.
__device__ __forceinline__ float2 round_to_e4m3x2(float x0, float x1) {
  return unpack_e4m3x2(encode_e4m3x2(x0, x1));
}

}  // namespace flamia
