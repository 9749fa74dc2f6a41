// A reference problem as the C API's flamia_problem, on device copies of its cu_seqlens: for
// the tools and tests that run the reference's problems through the public API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "flamia/flamia.h"
#include "reference/attention_ref.h"

namespace flamia::ref {

inline int longest_document(const std::vector<int32_t>& cu) {
  int n = 0;
  for (size_t b = 0; b + 1 < cu.size(); ++b) n = std::max(n, int(cu[b + 1] - cu[b]));
  return n;
}

// ScaleMode::kStatic's exponents as api_problem takes them: K's heads_kv, then V's (empty for
// the other modes).
inline std::vector<int8_t> static_exponents_key_then_value(const Problem& p) {
  std::vector<int8_t> exponents = p.static_key_exponents;
  exponents.insert(exponents.end(), p.static_value_exponents.begin(),
                   p.static_value_exponents.end());
  return exponents;
}

// Every field of `p`, with the host copies of cu_seqlens set so that the host checks them too.
// cu_q / cu_k: the device copies; smoothing_vector: the device copy of p.smoothing_vector (for
// KeySmoothing::kVector); static_exponents: the device copy of p.static_key_exponents followed
// by p.static_value_exponents (ScaleMode::kStatic).
inline flamia_problem api_problem(const Problem& p, const int32_t* cu_q, const int32_t* cu_k,
                                  const float* smoothing_vector = nullptr,
                                  const int8_t* static_exponents = nullptr) {
  if (p.score_format != ScoreFormat::kFp8)  // (numerics §9: no kernel reads NVFP4 on Hopper)
    throw std::invalid_argument("flamia::ref::api_problem: the C API computes Q·Kᵀ in FP8 only");
  flamia_problem problem;
  std::memset(&problem, 0, sizeof(problem));
  problem.cu_seqlens_q = cu_q;
  problem.cu_seqlens_k = cu_k;
  problem.host_cu_seqlens_q = p.cu_seqlens_q.data();
  problem.host_cu_seqlens_k = p.cu_seqlens_k.data();
  problem.batch = p.batch();
  problem.total_q = p.total_q();
  problem.total_k = p.total_k();
  problem.heads_q = p.heads_q;
  problem.heads_kv = p.heads_kv;
  problem.head_dim = p.head_dim;
  problem.max_seqlen_q = longest_document(p.cu_seqlens_q);
  problem.max_seqlen_k = longest_document(p.cu_seqlens_k);
  problem.softmax_scale = p.softmax_scale;
  problem.causal = p.causal ? 1 : 0;
  problem.sliding_window = p.sliding_window;
  problem.scale_mode = p.scale_mode == ScaleMode::kExact     ? FLAMIA_SCALE_EXACT
                       : p.scale_mode == ScaleMode::kBlock32 ? FLAMIA_SCALE_BLOCK32
                                                             : FLAMIA_SCALE_STATIC;
  if (p.scale_mode == ScaleMode::kStatic && static_exponents != nullptr) {
    problem.static_key_exponents = static_exponents;
    problem.static_value_exponents = static_exponents + p.heads_kv;
  }
  problem.key_smoothing = p.key_smoothing == KeySmoothing::kNone       ? FLAMIA_SMOOTH_NONE
                          : p.key_smoothing == KeySmoothing::kFirstKey ? FLAMIA_SMOOTH_FIRST_KEY
                                                                       : FLAMIA_SMOOTH_VECTOR;
  problem.key_smoothing_vector = smoothing_vector;
  return problem;
}

}  // namespace flamia::ref
