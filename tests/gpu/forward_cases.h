// Problems of the forward's API suites (overlap, amax outputs): a named shape with its scale
// mode and key smoothing, made into a reference problem with a random smoothing vector and
// static exponents that differ between heads (so that reading another head's shows); the check
// of a forward's LSE and {M, l} against the contract; and the FLAMIA_FORWARD_OVERLAP setting for
// a scope.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "forward_stats_checks.h"
#include "gpu_test_utils.h"
#include "reference/attention_ref.h"

namespace flamia::test {

struct ForwardCase {
  std::string name;
  std::vector<int> docs;  // query (and, unless keys is set, key) lengths
  std::vector<int> keys;  // non-causal key lengths; empty: the same as docs
  int heads_q;
  int heads_kv;
  int head_dim;
  bool causal;
  ScaleMode mode;
  KeySmoothing smoothing = KeySmoothing::kNone;
  int window = 0;  // a causal sliding window (flamia_problem.sliding_window), 0: none
};
inline void PrintTo(const ForwardCase& c, std::ostream* os) {
  *os << c.name;
}

inline ref::Problem make_case_problem(const ForwardCase& c) {
  ref::Problem p = ref::make_problem(c.docs, c.heads_q, c.heads_kv, c.head_dim, c.causal, c.mode);
  if (!c.keys.empty()) {
    p.cu_seqlens_k = {0};
    for (int n : c.keys) p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + n);
  }
  p.key_smoothing = c.smoothing;
  p.sliding_window = c.window;
  if (c.smoothing == KeySmoothing::kVector) {
    std::mt19937_64 rng(case_seed(c.name + "/smoothing"));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    p.smoothing_vector.resize(size_t(c.heads_kv) * c.head_dim);
    for (float& x : p.smoothing_vector) x = normal(rng);
  }
  for (size_t h = 0; h < p.static_key_exponents.size(); ++h) {
    p.static_key_exponents[h] = int8_t(ref::kDefaultStaticExponent + int(h % 3) - 1);
    p.static_value_exponents[h] = int8_t(ref::kDefaultStaticExponent + int(h % 2));
  }
  return p;
}

inline ref::Inputs make_case_inputs(const ForwardCase& c, const ref::Problem& p) {
  ref::InputOptions options;
  options.seed = case_seed(c.name);
  return ref::make_inputs(p, options);
}

// The first index where a and b differ bit for bit (a.size() when equal; 0 for other sizes).
template <typename T>
size_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  return a.size();
}

// A forward's LSE against the contract's (compare_lse: within kLseFlipBound, -inf exactly where
// the reference has it, NaN never), then {M, l} (expect_softmax_stats_match).
inline void expect_lse_and_stats_match(const std::vector<float>& lse,
                                       const std::vector<float>& stats,
                                       const ref::ForwardResult& expected) {
  EXPECT_EQ(compare_lse(lse, expected.lse).rows_off, 0u)
      << "LSE rows off the reference's (or not written)";
  expect_softmax_stats_match(stats, expected.softmax_stats);
}

// FLAMIA_FORWARD_OVERLAP set to `value` for the scope, then removed.
class OverlapSetting {
 public:
  explicit OverlapSetting(const std::string& value) {
    setenv(kVariable, value.c_str(), /*overwrite=*/1);
  }
  ~OverlapSetting() { unsetenv(kVariable); }
  OverlapSetting(const OverlapSetting&) = delete;
  OverlapSetting& operator=(const OverlapSetting&) = delete;

 private:
  static constexpr const char* kVariable = "FLAMIA_FORWARD_OVERLAP";
};

}  // namespace flamia::test
