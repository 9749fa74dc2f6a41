// Carving the quantized copies of Q, K and V out of a buffer (the workspace, or the
// saved-operands buffer): one definition of their sizes and exponent sharing for both.
#pragma once

#include "common/layout.h"

namespace flamia::api {

inline size_t exponent_count(int tokens, int heads) {
  return size_t(tokens) * size_t(heads);
}

inline Fp8Copy take_copy(WorkspaceCarver& carver, size_t value_bytes, int tokens, int heads) {
  Fp8Copy copy;
  copy.values = carver.take<uint8_t>(value_bytes);
  copy.exponents = carver.take<int8_t>(exponent_count(tokens, heads));
  return copy;
}

// A second layout of the same quantized bytes: its exponents are those of the first layout.
inline Fp8Copy take_values_sharing_exponents(WorkspaceCarver& carver, size_t value_bytes,
                                             int8_t* exponents) {
  Fp8Copy copy;
  copy.values = carver.take<uint8_t>(value_bytes);
  copy.exponents = exponents;
  return copy;
}

// The forward's copies: Q̂, K̂ row-major, V̂ᵀ token-major (lse_shift is not carved here).
inline void carve_forward_inputs(WorkspaceCarver& carver, const PackedShape& s,
                                 ForwardOperands& fwd) {
  const int d = s.head_dim;
  fwd.q = take_copy(carver, row_major_bytes(s.total_q, s.heads_q, d), s.total_q, s.heads_q);
  fwd.k = take_copy(carver, row_major_bytes(s.total_k, s.heads_kv, d), s.total_k, s.heads_kv);
  fwd.v_t = take_copy(carver, token_major_bytes(s.total_k, s.heads_kv, d), s.total_k, s.heads_kv);
}

// The backward's further copies of Q, K, V: Q̂ᵀ (Q̂'s exponents), K̂cᵀ, V̂ (V̂ᵀ's exponents).
inline void carve_backward_inputs(WorkspaceCarver& carver, const PackedShape& s,
                                  const ForwardOperands& fwd, Fp8Copy& q_t, Fp8Copy& k_centered_t,
                                  Fp8Copy& v) {
  const int d = s.head_dim;
  q_t = take_values_sharing_exponents(carver, token_major_bytes(s.total_q, s.heads_q, d),
                                      fwd.q.exponents);
  k_centered_t =
      take_copy(carver, token_major_bytes(s.total_k, s.heads_kv, d), s.total_k, s.heads_kv);
  v = take_values_sharing_exponents(carver, row_major_bytes(s.total_k, s.heads_kv, d),
                                    fwd.v_t.exponents);
}

// Both: every quantized copy of Q, K and V the FP8 backward reads.
inline void carve_quantized_inputs(WorkspaceCarver& carver, const PackedShape& s,
                                   ForwardOperands& fwd, Fp8Copy& q_t, Fp8Copy& k_centered_t,
                                   Fp8Copy& v) {
  carve_forward_inputs(carver, s, fwd);
  carve_backward_inputs(carver, s, fwd, q_t, k_centered_t, v);
}

}  // namespace flamia::api
