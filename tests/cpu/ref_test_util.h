// Helpers shared by the CPU reference tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "reference/attention_ref.h"

namespace flamia::ref::test {

// cu_seqlens of packed documents with the given lengths: {0, l0, l0 + l1, ...}.
inline std::vector<int32_t> cu_seqlens_from_lengths(const std::vector<int>& lengths) {
  std::vector<int32_t> cu{0};
  for (int n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

template <typename T>
bool all_finite(const std::vector<T>& x) {
  for (const T& v : x)
    if (!std::isfinite(double(v))) return false;
  return true;
}

// Largest |a - b| over matching finite entries; NaN if any entry of a is NaN.
template <typename A, typename B>
double max_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(double(a[i]))) return std::nan("");
    if (std::isinf(double(a[i])) && double(a[i]) == double(b[i])) continue;
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  }
  return worst;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (float_bits(a[i]) != float_bits(b[i])) return false;
  return true;
}

inline const char* mode_name(ScaleMode mode) {
  return scale_mode_name(mode);
}

// The reference accuracy tests' shapes: (head dim, GQA ratio, scale mode, causal).
using AccuracyShape = std::tuple<int, int, ScaleMode, bool>;
inline auto accuracy_shapes() {
  return ::testing::Combine(
      ::testing::Values(64, 128, 256), ::testing::Values(1, 2, 4),
      ::testing::Values(ScaleMode::kExact, ScaleMode::kBlock32, ScaleMode::kStatic),
      ::testing::Bool());
}
inline std::string accuracy_shape_name(const ::testing::TestParamInfo<AccuracyShape>& info) {
  return "d" + std::to_string(std::get<0>(info.param)) + "_gqa" +
         std::to_string(std::get<1>(info.param)) + "_" + mode_name(std::get<2>(info.param)) +
         (std::get<3>(info.param) ? "_causal" : "_full");
}

}  // namespace flamia::ref::test
