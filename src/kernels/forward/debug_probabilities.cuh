// Debug hook (tests only, selected by ForwardKernelArgs::debug_p_hat): writes every visible P̂
// the forward used as the real value it stands for, e4m3_decode(P̂) * 2^(M_running - 8) (exact),
// [Hq][total_q][total_k], so the backward's rebuilt P̂ can be compared element by element.
#pragma once

#include "common/fp8_numerics.h"
#include "kernels/common/softmax_numerics.cuh"
#include "kernels/forward/online_softmax.cuh"
#include "kernels/forward/work_items.cuh"

namespace flamia::forward {

template <int kBlockN>
__device__ __forceinline__ void write_debug_probabilities(
    const ForwardParams& p, const WorkItem& w, const float (&s)[kBlockN / 2], const RowState& state,
    int n, const int (&row_local)[2], const RowKeyRange (&row_keys)[2], int lane) {
  // Register i holds key first_key + offset(i) of row register_row(i); a key is written when it
  // lies in the row's visible range (the document's keys; causal or a segment: the row's own).
  const int first_key = w.geo.k_tile_base + n * kBlockN + 2 * (lane & 3);
  const bool masked = w.geo.doc_count > 1 || p.causal;
  int lower[2], upper[2];  // visible offsets
  int64_t row_base[2];     // index of the row's entry for key first_key
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int first = masked ? max(row_keys[r].first, 0) : 0;
    const int last = masked ? min(row_keys[r].last, w.geo.k_len - 1) : w.geo.k_len - 1;
    const int relative = first_key - w.geo.k_start;
    lower[r] = first - relative;
    upper[r] = row_local[r] < w.geo.q_len ? last - relative : -kBlockN;
    row_base[r] =
        (int64_t(w.head) * p.total_q + w.geo.q_start + row_local[r]) * p.total_k + first_key;
  }
  const float scale[2] = {exp2_int(int(state.row_max[0]) - kSoftmaxOffset),
                          exp2_int(int(state.row_max[1]) - kSoftmaxOffset)};
#pragma unroll
  for (int pair = 0; pair < kBlockN / 4; ++pair) {  // registers 2*pair, 2*pair + 1: one row
    const int i0 = 2 * pair;
    const int r = register_row(i0);
    // the P̂ bytes pack_e4m3x4 stores, by the same conversion
    const float2 p_hat = round_to_e4m3x2(s[i0], s[i0 + 1]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int offset = 8 * ((i0 + h) >> 2) + h;
      if (offset < lower[r] || offset > upper[r]) continue;
      p.debug_p_hat[row_base[r] + offset] = (h == 0 ? p_hat.x : p_hat.y) * scale[r];
    }
  }
}

}  // namespace flamia::forward
