// E4M3 (e4m3fn) encode/decode against an independent brute-force oracle: every code, every
// rounding tie, saturation, subnormals, NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fp8_numerics.h"
#include "kernels/forward/forward_config.h"

namespace flamia {
namespace {

constexpr int kCodes = 256;
constexpr uint8_t kSignBit = 0x80;

bool is_nan_code(uint8_t code) {
  return (code & 0x7F) == kE4M3NanCode;
}

// e4m3fn from its definition: bias 7, 3 mantissa bits, subnormals m * 2^-9, S.1111.111 = NaN.
double oracle_decode(uint8_t code) {
  if (is_nan_code(code)) return std::numeric_limits<double>::quiet_NaN();
  const int exponent = (code >> 3) & 0xF, mantissa = code & 7;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10);
  return (code & kSignBit) ? -magnitude : magnitude;
}

// Nearest code by exhaustive search over the finite codes, ties to the even code, satfinite.
uint8_t oracle_encode(float x) {
  const uint8_t sign = std::signbit(x) ? kSignBit : 0;
  if (std::isnan(x)) return sign | kE4M3NanCode;
  const double a = std::fabs(double(x));
  uint8_t best = 0;
  double best_distance = INFINITY;
  for (int code = 0; code <= kE4M3MaxCode; ++code) {
    const double distance = std::fabs(oracle_decode(uint8_t(code)) - a);
    if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
      best = uint8_t(code);
      best_distance = distance;
    }
  }
  return sign | best;  // values beyond 448 land on 448 (code 0x7E): saturation
}

TEST(E4M3, DecodeMatchesDefinitionForAllCodes) {
  for (int code = 0; code < kCodes; ++code) {
    const float got = e4m3_decode(uint8_t(code));
    const double want = oracle_decode(uint8_t(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
    } else {
      EXPECT_EQ(double(got), want) << code;
      EXPECT_EQ(std::signbit(got), bool(code & kSignBit)) << code;
    }
  }
  EXPECT_EQ(e4m3_decode(kE4M3MaxCode), kE4M3Max);
}

TEST(E4M3, AllCodesRoundTrip) {
  for (int code = 0; code < kCodes; ++code) {
    const uint8_t c = uint8_t(code);
    const uint8_t back = e4m3_encode(e4m3_decode(c));
    if (is_nan_code(c)) {
      EXPECT_TRUE(is_nan_code(back)) << code;
    } else {
      EXPECT_EQ(back, c) << code;  // including -0 (0x80)
    }
  }
}

TEST(E4M3, TiesRoundToEvenAndNeighboursRoundToNearest) {
  for (int code = 0; code < kE4M3MaxCode; ++code) {
    const float lo = e4m3_decode(uint8_t(code)), hi = e4m3_decode(uint8_t(code + 1));
    const float mid = 0.5f * (lo + hi);  // exact: one more bit than E4M3 has
    ASSERT_EQ(double(mid), 0.5 * (double(lo) + double(hi)));
    const uint8_t even = (code & 1) == 0 ? uint8_t(code) : uint8_t(code + 1);
    for (float sign : {1.0f, -1.0f}) {
      const uint8_t s = sign < 0 ? kSignBit : 0;
      EXPECT_EQ(e4m3_encode(sign * mid), s | even) << code;
      EXPECT_EQ(e4m3_encode(sign * std::nextafter(mid, INFINITY)), s | uint8_t(code + 1)) << code;
      EXPECT_EQ(e4m3_encode(sign * std::nextafter(mid, 0.0f)), s | uint8_t(code)) << code;
    }
  }
}

// A dense sweep of FP32 bit patterns up to 2^10 (beyond saturation), both signs, against the
// oracle (its linear search is done once per distinct neighbourhood through a sorted table).
TEST(E4M3, DenseSweepMatchesOracle) {
  std::vector<double> table;
  for (int code = 0; code <= kE4M3MaxCode; ++code) table.push_back(oracle_decode(uint8_t(code)));
  auto nearest = [&](float x) -> uint8_t {
    const uint8_t sign = std::signbit(x) ? kSignBit : 0;
    const double a = std::fabs(double(x));
    if (a >= table.back()) return sign | kE4M3MaxCode;
    const size_t hi = size_t(std::upper_bound(table.begin(), table.end(), a) - table.begin());
    const size_t lo = hi - 1;
    const double dlo = a - table[lo], dhi = table[hi] - a;
    const size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | uint8_t(pick);
  };
  // Spot-check the table oracle against the exhaustive one.
  for (float x : {0.0f, 1e-3f, 0.0146484375f, 1.0625f, 300.0f, 447.0f, 460.0f})
    ASSERT_EQ(nearest(x), oracle_encode(x)) << x;
  constexpr uint32_t kLimitBits = 0x44800000u;  // 1024.0f
  constexpr uint32_t kStride = 0x35;            // odd stride: hits every low-bit pattern class
  int64_t mismatches = 0, checked = 0;
  for (uint32_t bits = 0; bits < kLimitBits; bits += kStride)
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = bits_float(bits | sign);
      ++checked;
      if (e4m3_encode(x) != nearest(x)) ++mismatches;
    }
  EXPECT_GT(checked, 40000000 / 2);
  EXPECT_EQ(mismatches, 0);
}

TEST(E4M3, SaturatesFiniteAndInfinite) {
  for (float x : {448.0f, 448.5f, 464.0f, 479.9f, 480.0f, 512.0f, 1e10f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(e4m3_encode(x), kE4M3MaxCode) << x;
    EXPECT_EQ(e4m3_encode(-x), kSignBit | kE4M3MaxCode) << x;
  }
  EXPECT_EQ(e4m3_encode(std::nextafter(448.0f, 0.0f)), kE4M3MaxCode);  // rounds up to 448
  EXPECT_EQ(e4m3_encode(416.0f), 0x7D);                                // 1.625 * 2^8
}

TEST(E4M3, NanStaysNan) {
  EXPECT_EQ(e4m3_encode(std::numeric_limits<float>::quiet_NaN()), kE4M3NanCode);
  EXPECT_EQ(e4m3_encode(-std::numeric_limits<float>::quiet_NaN()), kSignBit | kE4M3NanCode);
  EXPECT_TRUE(std::isnan(e4m3_decode(kE4M3NanCode)));
  EXPECT_TRUE(std::isnan(e4m3_decode(kSignBit | kE4M3NanCode)));
}

// The forward's row-sum rows hold 2^x for x in the window; one step beyond either end E4M3
// cannot hold exactly (those keys take the FP32 fallback).
TEST(E4M3, RowSumWindowIsExactlyThePowersOfTwoE4M3Holds) {
  for (int x = forward::kRowSumMinExponent; x <= forward::kRowSumMaxExponent; ++x)
    EXPECT_EQ(e4m3_decode(e4m3_encode(std::ldexp(1.0f, x))), std::ldexp(1.0f, x)) << x;
  const float below = std::ldexp(1.0f, forward::kRowSumMinExponent - 1);
  const float above = std::ldexp(1.0f, forward::kRowSumMaxExponent + 1);
  EXPECT_NE(e4m3_decode(e4m3_encode(below)), below);
  EXPECT_NE(e4m3_decode(e4m3_encode(above)), above);
}

TEST(E4M3, Subnormals) {
  const float step = std::ldexp(1.0f, -9);
  for (int m = 1; m < 8; ++m) {
    EXPECT_EQ(e4m3_encode(m * step), uint8_t(m));
    EXPECT_EQ(e4m3_decode(uint8_t(m)), m * step);
  }
  EXPECT_EQ(e4m3_encode(0.5f * step), 0x00);           // tie between 0 and 1: even (0)
  EXPECT_EQ(e4m3_encode(1.5f * step), 0x02);           // tie between 1 and 2: even (2)
  EXPECT_EQ(e4m3_encode(2.5f * step), 0x02);           // tie between 2 and 3: even (2)
  EXPECT_EQ(e4m3_encode(7.5f * step), 0x08);           // tie into the smallest normal 2^-6
  EXPECT_EQ(e4m3_encode(0.25f * step), 0x00);          // underflow to zero
  EXPECT_EQ(e4m3_encode(-0.25f * step), kSignBit);     // keeps its sign: -0
  EXPECT_EQ(e4m3_encode(1e-40f), 0x00);                // an FP32 subnormal
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -6)), 0x08);  // min normal
}

TEST(E4M3, QuantizeAppliesTheScale) {
  EXPECT_EQ(quantize_e4m3(1.0f, -8), e4m3_encode(256.0f));
  EXPECT_EQ(quantize_e4m3(3.0f * 1024.0f, 10), e4m3_encode(3.0f));
  EXPECT_EQ(quantize_e4m3(-448.0f * 2.0f, 1), kSignBit | kE4M3MaxCode);
}

}  // namespace
}  // namespace flamia
