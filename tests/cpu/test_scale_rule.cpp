// The saturation-avoiding power-of-two scale rule and the register permutation helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "common/fp8_numerics.h"

namespace flamia {
namespace {

// Defining property: e is the smallest integer with a * 2^-e <= 448 (checked in double).
void expect_smallest_exponent(float a) {
  const int e = scale_exponent(a);
  if (e == kMinScaleExponent || e == kMaxScaleExponent) return;  // clamped: checked elsewhere
  const double scaled = std::ldexp(double(a), -e);
  EXPECT_LE(scaled, double(kE4M3Max)) << a;
  EXPECT_GT(std::ldexp(double(a), -(e - 1)), double(kE4M3Max)) << a;
  EXPECT_GE(scaled, double(kE4M3Max) / 2) << a;  // the block maximum lands in [224, 448]
}

TEST(ScaleRule, SmallestExponentOnRandomMagnitudes) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-110, 120);
  for (int n = 0; n < 200000; ++n)
    expect_smallest_exponent(std::ldexp(mantissa(rng), exponent(rng)));
}

// The kernels' branch-free form agrees with the rule on every sign, exponent and the mantissas
// around the 1.75 boundary, and on a stride over all FP32 bit patterns (NaN, Inf, subnormals).
TEST(ScaleRule, BranchFreeFormEqualsTheRule) {
  constexpr uint32_t kMantissas[] = {0u, 1u, 0x5FFFFFu, 0x600000u, 0x600001u, 0x7FFFFFu};
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t biased = 0; biased <= 0xFFu; ++biased)
      for (uint32_t mantissa : kMantissas) {
        const float a = bits_float(sign << 31 | biased << 23 | mantissa);
        EXPECT_EQ(scale_exponent_branch_free(a), scale_exponent(a)) << sign << " " << biased;
      }
  constexpr uint64_t kStride = 997;  // prime: every exponent and mantissa bit varies
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += kStride) {
    const float a = bits_float(uint32_t(b));
    ASSERT_EQ(scale_exponent_branch_free(a), scale_exponent(a)) << b;
  }
}

TEST(ScaleRule, BoundaryAtOnePointSevenFive) {
  for (int k = -100; k <= 120; ++k) {
    const float at = std::ldexp(1.75f, k);
    EXPECT_EQ(scale_exponent(at), k - 8) << k;  // lands exactly on 448
    EXPECT_EQ(scale_exponent(std::nextafter(at, INFINITY)), k - 7) << k;
    EXPECT_EQ(scale_exponent(std::ldexp(1.0f, k)), k - 8) << k;
    EXPECT_EQ(scale_exponent(std::nextafter(std::ldexp(1.0f, k), 0.0f)), k - 8) << k;
    expect_smallest_exponent(at);
    expect_smallest_exponent(std::nextafter(at, INFINITY));
  }
  EXPECT_EQ(scale_exponent(448.0f), 0);
  EXPECT_EQ(scale_exponent(449.0f), 1);
  EXPECT_EQ(scale_exponent(1.0f), -8);
  EXPECT_EQ(scale_exponent(-1.0f), -8);  // the sign is ignored
}

TEST(ScaleRule, ClampsToTheExponentRange) {
  EXPECT_EQ(scale_exponent(std::ldexp(1.0f, -120)), kMinScaleExponent);  // would be -128
  EXPECT_EQ(scale_exponent(1e-40f), kMinScaleExponent);                  // FP32 subnormal
  EXPECT_EQ(scale_exponent(std::ldexp(1.0f, -118)), kMinScaleExponent);  // -126 exactly
  EXPECT_EQ(scale_exponent(std::ldexp(1.0f, -117)), -125);
  EXPECT_EQ(scale_exponent(FLT_MAX), 120);  // the largest finite float needs no clamp
  EXPECT_LE(scale_exponent(FLT_MAX), kMaxScaleExponent);
}

TEST(ScaleRule, ZeroNanInfGiveZero) {
  EXPECT_EQ(scale_exponent(0.0f), 0);
  EXPECT_EQ(scale_exponent(-0.0f), 0);
  EXPECT_EQ(scale_exponent(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(scale_exponent(INFINITY), 0);
  EXPECT_EQ(scale_exponent(-INFINITY), 0);
}

TEST(ScaleRule, NothingSaturatesAfterScaling) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int n = 0; n < 100000; ++n) {
    const float a = std::ldexp(mantissa(rng), n % 60 - 30);
    const int e = scale_exponent(a);
    // The block maximum itself encodes without clamping: within half an E4M3 step of itself.
    const float back = e4m3_decode(quantize_e4m3(a, e)) * exp2_int(e);
    EXPECT_LE(std::fabs(back - a), a * 0.0625f) << a;
  }
}

TEST(ScaleRule, Exp2IntIsExact) {
  for (int e = kMinScaleExponent; e <= kMaxScaleExponent; ++e)
    EXPECT_EQ(double(exp2_int(e)), std::ldexp(1.0, e)) << e;
}

// Every int8 a caller may pass as a static exponent gives 2^e and 2^-e as normal FP32 numbers
// (the kernels and the reference scale by both): -128 and -127 count as -126, 127 as 126.
TEST(StaticScaleExponent, EveryInt8GivesNormalScalesBothWays) {
  for (int raw = -128; raw <= 127; ++raw) {
    const int e = static_scale_exponent(int8_t(raw));
    EXPECT_EQ(e, std::clamp(raw, kMinScaleExponent, -kMinScaleExponent)) << raw;
    EXPECT_EQ(double(exp2_int(e)), std::ldexp(1.0, e)) << raw;
    EXPECT_EQ(double(exp2_int(-e)), std::ldexp(1.0, -e)) << raw;
    EXPECT_GE(exp2_int(-e), FLT_MIN) << raw;
  }
}

TEST(Permutation, SlotAndTokenAreInverseBijections) {
  std::set<int> tokens;
  for (int slot = 0; slot < kPermutationGroup; ++slot) {
    const int token = permuted_token(slot);
    ASSERT_GE(token, 0);
    ASSERT_LT(token, kPermutationGroup);
    tokens.insert(token);
    EXPECT_EQ(permuted_slot(token), slot);
  }
  EXPECT_EQ(tokens.size(), size_t(kPermutationGroup));
  // pi(p) = 2(p>>2) + (p&1) + 8((p>>1)&1): slots 0..3 hold tokens 0, 1, 8, 9.
  EXPECT_EQ(permuted_token(0), 0);
  EXPECT_EQ(permuted_token(1), 1);
  EXPECT_EQ(permuted_token(2), 8);
  EXPECT_EQ(permuted_token(3), 9);
  EXPECT_EQ(permuted_token(15), 15);
  EXPECT_EQ(permuted_index(16 + 8), 16 + 2);
  EXPECT_EQ(padded_tokens(0), 0);
  EXPECT_EQ(padded_tokens(1), 16);
  EXPECT_EQ(padded_tokens(17), 32);
  EXPECT_EQ(padded_tokens(32), 32);
}

}  // namespace
}  // namespace flamia
