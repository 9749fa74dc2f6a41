// The forward's softmax statistics against the contract's (docs/numerics.md §4): the bound on
// LSE and l, and the comparison of LSE and the check of {M, l} shared by the forward kernel's
// suite and the API suites.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace flamia::test {

// l sums the quantized P̂ (numerics §4 step 5): where the tensor cores' FP8 accumulation moves a
// row's largest P̂ across an E4M3 rounding boundary, LSE and ln(l) move by up to one E4M3 step of
// the top binade, ln(1 + 1/8) (rows with few keys); on average far less.
inline const double kLseFlipBound = std::log(1.0 + 1.0 / 8.0) + 1e-3;

// A forward's LSE per row against the contract's: `rows_off` counts the rows that are not -inf
// exactly where the reference has -inf (rows without keys), or elsewhere not within
// kLseFlipBound (NaN, a poisoned row that was not written, never is); the largest and mean
// differences over the rows with keys.
struct LseComparison {
  size_t rows_off = 0;
  double max_error = 0.0;
  double mean_error = 0.0;
};

inline LseComparison compare_lse(const std::vector<float>& lse,
                                 const std::vector<float>& expected) {
  LseComparison c;
  if (lse.size() != expected.size()) {
    ADD_FAILURE() << "LSE has " << lse.size() << " rows, the reference " << expected.size();
    c.rows_off = std::max(lse.size(), expected.size());
    return c;
  }
  size_t rows_with_keys = 0;
  double error_sum = 0.0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(expected[i])) {
      c.rows_off += !(std::isinf(lse[i]) && lse[i] < 0);
      continue;
    }
    const double error = std::fabs(double(lse[i]) - double(expected[i]));
    c.rows_off += !(error <= kLseFlipBound);
    if (std::isfinite(error)) {
      c.max_error = std::max(c.max_error, error);
      error_sum += error;
    }
    ++rows_with_keys;
  }
  c.mean_error = rows_with_keys > 0 ? error_sum / double(rows_with_keys) : 0.0;
  return c;
}

// {M, l} per row (pairs) against the reference's: every row written and finite; the integer
// offsets M may differ on 1% of the rows (+1); where M agrees, l within kLseFlipBound in log;
// {0, 0} exactly where the reference has l = 0 (rows without keys).
inline void expect_softmax_stats_match(const std::vector<float>& stats,
                                       const std::vector<float>& expected) {
  ASSERT_EQ(stats.size(), expected.size());
  size_t not_finite = 0, m_mismatch = 0, l_outside = 0;
  for (size_t i = 0; i < stats.size(); i += 2) {
    // A poisoned (NaN) M would otherwise count only as one of the tolerated M mismatches, and
    // skip the l check with it.
    const float m = stats[i], l = stats[i + 1];
    const float m_ref = expected[i], l_ref = expected[i + 1];
    not_finite += !std::isfinite(m) || !std::isfinite(l);
    m_mismatch += m != m_ref;
    if (l_ref == 0.0f) {
      l_outside += m != 0.0f || l != 0.0f;
    } else if (m == m_ref) {
      l_outside += !(std::fabs(std::log(double(l) / double(l_ref))) <= kLseFlipBound);
    }
  }
  EXPECT_EQ(not_finite, 0u) << "{M, l} rows not finite / not written";
  EXPECT_LE(m_mismatch, stats.size() / 2 / 100 + 1) << "integer offsets M differ";
  EXPECT_EQ(l_outside, 0u) << "row sums l off the reference's";
}

}  // namespace flamia::test
