// BF16 <-> FP32 on the host: the reference stores every BF16 tensor as raw uint16_t bits.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"

namespace flamia::ref {

inline float bf16_to_float(uint16_t bits) {
  return bits_float(uint32_t(bits) << 16);
}

// Round to nearest, ties to even (what __float2bfloat16_rn does); NaN stays a quiet NaN.
inline uint16_t float_to_bf16(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t((u + rounding) >> 16);
}

// x rounded to the nearest BF16 value, as an FP32 number.
inline float round_to_bf16(float x) {
  return bf16_to_float(float_to_bf16(x));
}

}  // namespace flamia::ref
