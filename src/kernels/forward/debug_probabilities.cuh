// Debug hook (tests only, selected by ForwardKernelArgs::debug_p_hat): writes every visible P̂
// the forward used as the real value it stands for, e4m3_decode(P̂) * 2^(M_running - 8) (exact),
// [Hq][total_q][total_k], so the backward's rebuilt P̂ can be compared element by element.
#pragma once

#include "common/fp8_numerics.h"
#include "kernels/forward/online_softmax.cuh"
#include "kernels/forward/work_items.cuh"

namespace flamia::forward {

template <int kBlockN>
__device__ __forceinline__ void write_debug_probabilities(
    const ForwardParams& p, const WorkItem& w, const float (&s)[kBlockN / 2], const RowState& state,
    int n, const int (&row_local)[2], const RowKeyRange (&row_keys)[2], int lane) {
  const int key0 = w.geo.k_tile_base + n * kBlockN;
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i) {
    const int r = register_row(i);
    const int key = key0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
    const int key_local = key - w.geo.k_start;
    if (row_local[r] >= w.geo.q_len || key_local < 0 || key_local >= w.geo.k_len) continue;
    const bool masked = w.geo.doc_count > 1 || p.causal;
    if (masked && (key_local < row_keys[r].first || key_local > row_keys[r].last)) continue;
    const float value =
        e4m3_decode(e4m3_encode(s[i])) * exp2_int(int(state.row_max[r]) - kSoftmaxOffset);
    const int64_t at =
        (int64_t(w.head) * p.total_q + w.geo.q_start + row_local[r]) * p.total_k + key;
    p.debug_p_hat[at] = value;
  }
}

}  // namespace flamia::forward
