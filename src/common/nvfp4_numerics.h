// NVFP4 (FLAMIA's mixed path: Q·Kᵀ and its backward recomputation in 4 bits) as scalar host /
// device functions: the E2M1 element format, the E4M3 scale of each block of 16 elements along
// the head dim, and the power-of-two scale above it (docs/numerics.md §9). Hopper has no FP4
// tensor core, so only the CPU reference uses these today (accuracy studies); a Blackwell
// quantize kernel would compute the same bits with cvt.rn.satfinite.e2m1x2.f32.
#pragma once

#include <cmath>

#include "common/fp8_numerics.h"

namespace flamia {

constexpr int kNvfp4BlockElements = 16;  // one E4M3 scale per 16 elements of a row (head dim)
constexpr float kE2M1Max = 6.0f;         // largest E2M1 magnitude (1.5 * 2^2)
constexpr uint8_t kE2M1MaxCode = 0x7;    // its code; bit 3 is the sign
constexpr uint8_t kE2M1SignBit = 0x8;
// The power-of-two scale above the block scales sits this many binades below the E4M3 rule's
// exponent of the same tokens (scale_exponent: amax 2^-e in (224, 448]). With it amax 2^-e' is in
// (896, 1792], so the largest block scale, amax 2^-e' / 6 rounded up to E4M3, is at most 320:
// below E4M3's 448 (no saturation; an offset of 3 would need up to 597) with the fewest binades
// given up at the top of E4M3's range.
constexpr int kNvfp4ExponentOffset = 2;

// E2M1 decode: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
FLAMIA_HD float e2m1_decode(uint8_t code) {
  const int magnitude_code = code & kE2M1MaxCode;
  const int exponent = magnitude_code >> 1, mantissa = magnitude_code & 1;
  // exponent 0: subnormal m * 0.5; else (1 + m/2) 2^(exponent - 1)
  const float magnitude = exponent == 0 ? 0.5f * float(mantissa)
                                        : (1.0f + 0.5f * float(mantissa)) * exp2_int(exponent - 1);
  return (code & kE2M1SignBit) ? -magnitude : magnitude;
}

// E2M1 encode, round-to-nearest-even, satfinite (|x| > 5 -> +-6): the midpoints between
// neighbouring values compared exactly, ties to the even code; NaN -> +6 (E2M1 has no NaN), as
// cvt.rn.satfinite.e2m1x2.f32 does (CUDA's cuda_fp4.hpp emulation), so the bits match the
// device's for every input. Callers flag non-finite inputs themselves (numerics §9).
FLAMIA_HD uint8_t e2m1_encode(float x) {
  if (x != x) return kE2M1MaxCode;
  const float a = fabsf(x);
  uint8_t code;
  if (a <= 0.25f)
    code = 0;
  else if (a < 0.75f)
    code = 1;
  else if (a <= 1.25f)
    code = 2;
  else if (a < 1.75f)
    code = 3;
  else if (a <= 2.5f)
    code = 4;
  else if (a < 3.5f)
    code = 5;
  else if (a <= 5.0f)
    code = 6;
  else
    code = kE2M1MaxCode;
  return (float_bits(x) >> 31) ? uint8_t(code | kE2M1SignBit) : code;
}

// The power-of-two scale exponent e' of NVFP4 tokens from the E4M3 rule's exponent e of the same
// tokens (whatever the scale mode's blocks: per token, per document-local 32-token block, or a
// static exponent per head), so that NVFP4 inherits the mode's causality exactly.
FLAMIA_HD int nvfp4_exponent(int e4m3_rule_exponent) {
  const int e = e4m3_rule_exponent - kNvfp4ExponentOffset;
  return e < kMinScaleExponent ? kMinScaleExponent : e;
}

// A block's E4M3 scale from its absolute maximum already scaled by 2^-e' (`scaled_amax`, finite,
// >= 0): the smallest E4M3 value s with 6 s >= scaled_amax (rounded up, so no element of the
// block saturates), 448 when none is (the block saturates: only past the static scale's range).
FLAMIA_HD uint8_t nvfp4_block_scale_code(float scaled_amax) {
  if (scaled_amax >= kE2M1Max * kE4M3Max) return kE4M3MaxCode;
  uint8_t code = e4m3_encode(scaled_amax / kE2M1Max);  // nearest; one step off at most
  if (kE2M1Max * e4m3_decode(code) < scaled_amax) ++code;
  while (code > 0 && kE2M1Max * e4m3_decode(uint8_t(code - 1)) >= scaled_amax) --code;
  return code;
}

// One element: E2M1 of fl32(x 2^-e' * fl32(1 / s)), the product a kernel forms (the reciprocal
// rounded once, IEEE); code 0 in a block whose scale is 0 (every element of it is 0, or -0; a
// kernel must select it: x * fl(1/0) would be NaN or Inf).
FLAMIA_HD uint8_t nvfp4_element_code(float x, int exponent, uint8_t scale_code) {
  const float scale = e4m3_decode(scale_code);
  if (scale == 0.0f) return 0;
#if defined(__CUDA_ARCH__)
  const float inverse = __frcp_rn(scale);
#else
  const float inverse = 1.0f / scale;
#endif
  return e2m1_encode((x * exp2_int(-exponent)) * inverse);
}

}  // namespace flamia
