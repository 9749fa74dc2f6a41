// Scalar numerics shared by the CPU reference and the CUDA kernels: the E4M3 format, the
// power-of-two scale rule, the token permutation of register-sourced operands. docs/numerics.md
// is the contract these functions implement; change both together.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FLAMIA_HD __host__ __device__ __forceinline__
#else
#define FLAMIA_HD inline
#endif

namespace flamia {

// ---- Formats -------------------------------------------------------------------------------
constexpr float kE4M3Max = 448.0f;       // 1.75 * 2^8, largest finite e4m3fn value
constexpr uint8_t kE4M3MaxCode = 0x7E;   // its encoding
constexpr uint8_t kE4M3NanCode = 0x7F;   // e4m3fn has no infinities
constexpr int kMinScaleExponent = -126;  // keeps 2^e and 2^-e normal FP32 numbers
constexpr int kMaxScaleExponent = 127;

// ---- Scale blocks ---------------------------------------------------------------------------
constexpr int kBlock32Tokens = 32;        // `block32` mode: document-local blocks of 32 tokens
constexpr int kDoScaledBlockTokens = 64;  // dO/l copy: document-local blocks of 64 queries

// ---- Softmax ---------------------------------------------------------------------------------
// P̂ = e4m3(exp2(t - M + kSoftmaxOffset)) with integer M >= max t: the row maximum of P̂ lies in
// [2^7, 2^8], the top of E4M3's range, whatever the per-key V scales are.
constexpr int kSoftmaxOffset = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- Register permutation ----------------------------------------------------------------
// Turning a wgmma accumulator into an 8-bit A operand without shuffles permutes the reduction
// index inside each group of 16: A's k-slot p holds accumulator column permuted_token(p). The B
// operand of such a product stores its tokens in that order (global groups of 16 tokens).
constexpr int kPermutationGroup = 16;
FLAMIA_HD int permuted_token(int slot) {
  return 2 * (slot >> 2) + (slot & 1) + 8 * ((slot >> 1) & 1);
}
// Inverse: the slot that holds token `token` (0..15) of its group.
FLAMIA_HD int permuted_slot(int token) {
  return 4 * ((token & 7) >> 1) + (token & 1) + 2 * (token >> 3);
}
// Index of `token` in a permuted token-contiguous row.
FLAMIA_HD int64_t permuted_index(int64_t token) {
  return (token & ~int64_t(kPermutationGroup - 1)) + permuted_slot(int(token & 15));
}
// Token-contiguous copies are padded to a multiple of the permutation group.
FLAMIA_HD int64_t padded_tokens(int64_t tokens) {
  return (tokens + kPermutationGroup - 1) / kPermutationGroup * kPermutationGroup;
}

// ---- Bit helpers -----------------------------------------------------------------------------
FLAMIA_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
FLAMIA_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// 2^e as an FP32 number, exact for e in [kMinScaleExponent, kMaxScaleExponent].
FLAMIA_HD float exp2_int(int e) {
  return bits_float(uint32_t(e + 127) << 23);
}

// A caller-supplied static exponent (scale mode kStatic) as used: clamped to the range where
// 2^e and 2^-e are normal FP32 numbers (an int8 below -126 counts as -126, 127 as 126: 2^-127
// is subnormal, and exp2_int(-127) would be 0).
constexpr int kMaxStaticExponent = -kMinScaleExponent;
FLAMIA_HD int static_scale_exponent(int8_t e) {
  return e < kMinScaleExponent    ? kMinScaleExponent
         : e > kMaxStaticExponent ? kMaxStaticExponent
                                  : int(e);
}

// Scale mode kStatic's row factor f_i = max((c 2^eq_i) 2^ek, 2^-126) (numerics §4, static):
// one FP32 product per row, kept a positive normal number so that fma(-inf, f_i, x) is -inf
// (masked scores) and fma stays monotone in the score.
FLAMIA_HD float static_row_factor(float row_factor, float key_scale) {
  const float smallest_normal = exp2_int(kMinScaleExponent);
  const float f = row_factor * key_scale;
  return f < smallest_normal ? smallest_normal : f;
}

// The dO'' copy's factor (numerics §3): r = 1/l rounded once (IEEE), 0 for l = 0 (a row with
// no visible key). The copy holds q8((dO * r) 2^-ew), and 0 wherever r = 0.
FLAMIA_HD float inverse_l_factor(float l) {
#if defined(__CUDA_ARCH__)
  return l == 0.0f ? 0.0f : __frcp_rn(l);
#else
  return l == 0.0f ? 0.0f : 1.0f / l;
#endif
}

// FP32 mantissa field of 1.75 (448 = 1.75 * 2^8): the scale rule's boundary.
constexpr uint32_t kMantissaOf1_75 = 0x600000u;

// The saturation-avoiding scale rule: the smallest e with amax * 2^-e <= 448, computed exactly
// from amax's exponent and mantissa (no log2f/ceilf), clamped to the representable range.
// amax = 0, NaN or Inf gives e = 0.
FLAMIA_HD int scale_exponent(float amax) {
  const uint32_t bits = float_bits(amax) & 0x7FFFFFFFu;
  const int biased = int(bits >> 23);
  if (bits == 0 || biased == 0xFF) return 0;
  if (biased == 0) return kMinScaleExponent;  // FP32 subnormal
  const uint32_t mantissa = bits & 0x7FFFFFu;
  const int exponent = biased - 127;
  // amax = (1 + m) 2^E;  (1 + m) 2^(E - e) <= 1.75 * 2^8  <=>  e = E - 8 if 1 + m <= 1.75.
  int e = mantissa <= kMantissaOf1_75 ? exponent - 8 : exponent - 7;
  if (e < kMinScaleExponent) e = kMinScaleExponent;
  if (e > kMaxScaleExponent) e = kMaxScaleExponent;
  return e;
}

// scale_exponent with selects instead of branches: the same value for every input (tests/cpu/
// test_scale_rule.cpp compares them over the FP32 bit patterns). The rule's upper clamp never
// binds (the largest finite amax, < 2^128, gives 120), and FP32 subnormals land on the lower one.
// For kernels' per-row rules, where ptxas keeps scale_exponent's early returns as branches (the
// backward's key warpgroups: dK's operand exponent, two rows per thread per step).
FLAMIA_HD int scale_exponent_branch_free(float amax) {
  const uint32_t bits = float_bits(amax) & 0x7FFFFFFFu;
  const int biased = int(bits >> 23);
  constexpr int kLargestFiniteRule = 0xFE - 127 - 7;
  static_assert(kLargestFiniteRule <= kMaxScaleExponent, "the upper clamp never binds");
  const int e = biased - 127 - 8 + ((bits & 0x7FFFFFu) > kMantissaOf1_75 ? 1 : 0);
  const int clamped = e < kMinScaleExponent ? kMinScaleExponent : e;
  return (bits == 0 || biased == 0xFF) ? 0 : clamped;
}

// E4M3 (e4m3fn) decode: exact in FP32.
FLAMIA_HD float e4m3_decode(uint8_t code) {
  const uint32_t sign = uint32_t(code & 0x80) << 24;
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 7;
  if ((code & 0x7F) == kE4M3NanCode) return bits_float(0x7FC00000u | sign);
  float magnitude;
  if (exponent == 0) {
    magnitude = float(mantissa) * exp2_int(-9);  // subnormal: m * 2^-9
  } else {
    magnitude = bits_float(uint32_t(exponent - 7 + 127) << 23 | uint32_t(mantissa) << 20);
  }
  return bits_float(float_bits(magnitude) | sign);
}

// Round-to-nearest-even of a non-negative float that holds a value in [0, 16], exactly.
FLAMIA_HD float round_half_even_small(float x) {
  const float magic = 8388608.0f;  // 2^23: adding it rounds to an integer in RNE
  return (x + magic) - magic;
}

// E4M3 encode, round-to-nearest-even, satfinite (|x| >= 448 -> +-448, NaN -> NaN).
// The host twin of the device's cvt.rn.satfinite.e4m3x2.f32; tests check them bit for bit.
FLAMIA_HD uint8_t e4m3_encode(float x) {
  const uint32_t bits = float_bits(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return uint8_t(sign | kE4M3NanCode);
  const float a = bits_float(abs_bits);
  if (a >= kE4M3Max) return uint8_t(sign | kE4M3MaxCode);
  constexpr float kMinNormal = 0.015625f;  // 2^-6
  if (a < kMinNormal) {
    // subnormal grid 2^-9; code 8 (= 2^-6) is the smallest normal, encoded the same way
    return uint8_t(sign | uint8_t(round_half_even_small(a * 512.0f)));
  }
  const int exponent = int(abs_bits >> 23) - 127;                                  // -6 .. 8
  const float fraction = bits_float((abs_bits & 0x7FFFFFu) | 0x3F800000u) - 1.0f;  // [0, 1)
  int mantissa = int(round_half_even_small(fraction * 8.0f));                      // 0 .. 8
  int biased = exponent + 7;
  if (mantissa == 8) {
    mantissa = 0;
    biased += 1;
  }
  return uint8_t(sign | uint8_t(biased << 3) | uint8_t(mantissa));
}

// One quantized value: e4m3(x * 2^-e). The product is exact for every x that matters (a result
// below FP32's normal range encodes to zero either way).
FLAMIA_HD uint8_t quantize_e4m3(float x, int scale_exp) {
  return e4m3_encode(x * exp2_int(-scale_exp));
}

}  // namespace flamia
