// Epilogue of a work item: O = acc / l in BF16, LSE (natural log, + key-smoothing shift) and the
// {M, l} statistics the backward rebuilds P̂ from. Rows past the document end are not written;
// rows without a visible key get O = 0, LSE = -inf, stats {0, 0}.
#pragma once

#include <cuda_bf16.h>

#include "kernels/forward/online_softmax.cuh"
#include "kernels/forward/work_items.cuh"

namespace flamia::forward {

// `o` is the accumulator: its first kOutRegisters registers hold O (the rest, row sums, are
// already in state.row_sum, which holds the whole row's l in every thread of the quad).
template <int kOutRegisters, int kRegisters>
__device__ __forceinline__ void write_outputs(const ForwardParams& p, const WorkItem& w,
                                              const float (&o)[kRegisters], RowState& state,
                                              const int (&row_local)[2], int lane) {
  static_assert(kOutRegisters <= kRegisters, "O registers");
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float l = state.row_sum[r];
    if (row_local[r] >= w.geo.q_len) continue;
    const bool empty = !(l > 0.0f);
    const float inv = empty ? 0.0f : 1.0f / l;
    const int64_t token = w.geo.q_start + row_local[r];
    __nv_bfloat16* out = p.o + token * p.o_token_stride + int64_t(w.head) * p.o_head_stride;
#pragma unroll
    for (int c = 0; c < kOutRegisters / 4; ++c) {
      const int i = 4 * c + 2 * r;
      const __nv_bfloat162 pair = __floats2bfloat162_rn(o[i] * inv, o[i + 1] * inv);
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * c + 2 * (lane & 3)) = pair;
    }
    if ((lane & 3) == 0) {
      const size_t row = size_t(w.head) * p.total_q + token;
      const float m = state.row_max[r];
      float lse = -INFINITY;
      if (!empty) {
        lse = logf(l) + (m - float(kSoftmaxOffset)) * kLn2;
        if (p.lse_shift) lse += p.lse_shift[row];
      }
      p.lse[row] = lse;
      if (p.softmax_stats) {
        p.softmax_stats[2 * row] = empty ? 0.0f : m;
        p.softmax_stats[2 * row + 1] = empty ? 0.0f : l;
      }
    }
  }
}

}  // namespace flamia::forward
