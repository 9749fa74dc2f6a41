// Scale mode static's softmax arithmetic (docs/numerics.md §4, static) on the host, in FP32: the
// kernels take M_i = ceil(fma(max_j S_ij, f_i, ev)) from the largest score instead of the largest
// t_ij = fma(S_ij, f_i, ev) the contract names, and fold the offset into the one fma,
// exp2(fma(S, f_i, ev - (M_i - 8))). The claims: both maxima give the same M for every f_i that
// static_row_factor returns (fma is monotone in S for f > 0), masked scores (-inf) stay -inf
// through the fma, and ev - (M - 8) is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/fp8_numerics.h"

namespace flamia {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// M from the largest t (the contract) and from the largest S (the kernels).
float max_from_logits(const std::vector<float>& s, float f, float ev) {
  float m = -kInf;
  for (float x : s) m = std::max(m, std::fmaf(x, f, ev));
  return std::ceil(m);
}
float max_from_scores(const std::vector<float>& s, float f, float ev) {
  float m = -kInf;
  for (float x : s) m = std::max(m, x);
  return std::ceil(std::fmaf(m, f, ev));
}

TEST(StaticSoftmaxAlgebra, RowMaximumFromTheLargestScore) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 140), row_exp(-126, 127), value_exp(-126, 127);
  std::uniform_int_distribution<int> length(1, 200), masked_share(0, 3);
  int rows = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    // factors across the whole range static_row_factor returns, incl. its clamp at 2^-126
    const float f = static_row_factor(0.12752f * exp2_int(row_exp(gen)),
                                      exp2_int(std::max(-126, row_exp(gen) / 2)));
    ASSERT_GE(f, exp2_int(kMinScaleExponent));
    const float ev = float(value_exp(gen));
    std::vector<float> s(size_t(length(gen)));
    for (float& x : s) x = std::ldexp(mantissa(gen), exponent(gen) / 4);
    if (masked_share(gen) == 0)  // rows with masked keys, or fully masked rows
      for (size_t j = 0; j < s.size(); ++j)
        if (j % 3 != 0 || trial % 7 == 0) s[j] = -kInf;
    ASSERT_EQ(max_from_logits(s, f, ev), max_from_scores(s, f, ev))
        << "trial " << trial << " f " << f << " ev " << ev;
    ++rows;
  }
  EXPECT_EQ(rows, 20000);
}

TEST(StaticSoftmaxAlgebra, MaskedScoresStayMaskedAndTheBiasIsExact) {
  for (int e = kMinScaleExponent; e <= kMaxScaleExponent; ++e) {
    const float f = static_row_factor(exp2_int(e), exp2_int(kMinScaleExponent));
    ASSERT_EQ(std::fmaf(-kInf, f, 100.0f), -kInf) << "f " << f;  // never NaN: f > 0
  }
  for (int ev = kMinScaleExponent; ev <= kMaxScaleExponent; ++ev)
    for (int m = -300; m <= 300; m += 7) {
      const float offset = float(m) - float(kSoftmaxOffset);  // softmax_offset of M = m
      ASSERT_EQ(float(ev) - offset, float(ev - m + kSoftmaxOffset));
    }
}

TEST(StaticSoftmaxAlgebra, RowFactorIsClampedToTheNormalRange) {
  const float smallest = exp2_int(kMinScaleExponent);
  EXPECT_EQ(static_row_factor(0.25f, 0.5f), 0.125f);  // normal products pass unchanged
  EXPECT_EQ(static_row_factor(exp2_int(-100), exp2_int(-100)), smallest);  // underflows to 0
  EXPECT_EQ(static_row_factor(exp2_int(-70), exp2_int(-60)), smallest);    // subnormal
  EXPECT_EQ(static_row_factor(exp2_int(-63), exp2_int(-63)), smallest);    // exactly 2^-126
  EXPECT_EQ(static_row_factor(1.5f * exp2_int(-63), exp2_int(-63)), 1.5f * smallest);
}

}  // namespace
}  // namespace flamia
