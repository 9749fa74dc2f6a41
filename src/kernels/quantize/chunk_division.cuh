// x / l for the 16 channels of one token (the dO / l copy, numerics §3: an IEEE division), bit
// for bit __fdiv_rn(x[i], l), with what the compiler's division repeats per element done once.
//
// The compiler's division of x by l is: r = rcp.approx(l), refined once (r += r (1 - l r));
// q = x r refined by one residual step (q += r (x - l q)); and FCHK, which sends operands near
// the ends of the exponent range to a slow path. The fast steps give the correctly rounded
// quotient whenever no step leaves the normal range. Here the range is checked once per chunk,
// conservatively: l and every x with magnitude in [2^-kExponentBound, 2^kExponentBound] keep
// the quotient, the residual and the reciprocal's error normal; such a chunk runs the fast
// steps alone (one reciprocal, three FMAs per element), any other (a zero, a tiny, huge or
// non-finite value) runs __fdiv_rn per element. l = 0 (a row without visible keys) gives 0.
#pragma once

#include <cstdint>

namespace flamia::quantize {

constexpr int kChunkDivisionExponentBound = 60;
constexpr uint32_t kFloatExponentBias = 127;
constexpr int kFloatMantissaBits = 23;
constexpr uint32_t kFloatMagnitudeMask = 0x7FFFFFFFu;
// Magnitude bits of 2^-bound and of the largest float below 2^(bound + 1).
constexpr uint32_t kFastDivisionLow = (kFloatExponentBias - kChunkDivisionExponentBound)
                                      << kFloatMantissaBits;
constexpr uint32_t kFastDivisionHigh =
    ((kFloatExponentBias + kChunkDivisionExponentBound + 1) << kFloatMantissaBits) - 1;

// Whether |v| lies in [2^-bound, 2^(bound + 1)): not zero, subnormal, tiny, huge, Inf or NaN.
__device__ __forceinline__ bool in_fast_division_range(float v) {
  const uint32_t magnitude = __float_as_uint(v) & kFloatMagnitudeMask;
  return magnitude - kFastDivisionLow <= kFastDivisionHigh - kFastDivisionLow;
}

template <int kCount>
__device__ __forceinline__ void divide_chunk(float (&x)[kCount], float l) {
  if (l == 0.0f) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) x[i] = 0.0f;
    return;
  }
  bool fast = in_fast_division_range(l);
#pragma unroll
  for (int i = 0; i < kCount; ++i) fast = fast && in_fast_division_range(x[i]);
  if (fast) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(l));
    r = __fmaf_rn(r, __fmaf_rn(-l, r, 1.0f), r);
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const float q = __fmaf_rn(x[i], r, 0.0f);
      x[i] = __fmaf_rn(r, __fmaf_rn(-l, q, x[i]), q);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kCount; ++i) x[i] = __fdiv_rn(x[i], l);
  }
}

}  // namespace flamia::quantize
