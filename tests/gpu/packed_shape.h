// The kernels' PackedShape of a reference problem (one place for the GPU tests that launch the
// kernels directly rather than through the C API).
#pragma once

#include <cstdint>

#include "common/layout.h"
#include "reference/api_problem.h"
#include "reference/attention_ref.h"

namespace flamia::test {

// cu_q, cu_k: the problem's cu_seqlens on the device.
inline PackedShape packed_shape_of(const ref::Problem& p, const int32_t* cu_q,
                                   const int32_t* cu_k) {
  PackedShape s;
  s.cu_seqlens_q = cu_q;
  s.cu_seqlens_k = cu_k;
  s.batch = p.batch();
  s.total_q = p.total_q();
  s.total_k = p.total_k();
  s.heads_q = p.heads_q;
  s.heads_kv = p.heads_kv;
  s.head_dim = p.head_dim;
  s.causal = p.causal;
  s.sliding_window = p.sliding_window;
  s.max_seqlen_q = ref::longest_document(p.cu_seqlens_q);
  s.max_seqlen_k = ref::longest_document(p.cu_seqlens_k);
  return s;
}

}  // namespace flamia::test
