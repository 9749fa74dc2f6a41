// Epilogue of a work item: O = acc / l in BF16, LSE (natural log, + key-smoothing shift) and the
// {M, l} statistics the backward rebuilds P̂ from. Rows past the document end are not written;
// rows without a visible key get O = 0, LSE = -inf, stats {0, 0}.
#pragma once

#include <cuda_bf16.h>

#include "kernels/common/staged_rows.cuh"
#include "kernels/forward/online_softmax.cuh"
#include "kernels/forward/work_items.cuh"
#include "kernels/hopper/sync.cuh"

namespace flamia::forward {

__device__ __forceinline__ float inverse_row_sum(float l) {
  return l > 0.0f ? 1.0f / l : 0.0f;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// LSE and the statistics of the thread's rows (one thread of each row's quad writes them).
__device__ __forceinline__ void write_row_statistics(const ForwardParams& p, const WorkItem& w,
                                                     const RowState& state,
                                                     const int (&row_local)[2], int lane) {
  if ((lane & 3) != 0) return;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    if (row_local[r] >= w.geo.q_len) continue;
    const float l = state.row_sum[r];
    const bool empty = !(l > 0.0f);
    const size_t row = size_t(w.head) * p.total_q + w.geo.q_start + row_local[r];
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

// O straight from the accumulator: each thread stores its column pairs (4 bytes), so a warp's
// store covers 16 bytes of each of 8 rows. (The fused-quantize kernel, whose producer holds the
// shared memory the staged epilogue uses.)
// `o` is the accumulator: its first kOutRegisters registers hold O (the rest, row sums, are
// already in state.row_sum, which holds the whole row's l in every thread of the quad).
template <int kOutRegisters, int kRegisters>
__device__ __forceinline__ void write_outputs(const ForwardParams& p, const WorkItem& w,
                                              const float (&o)[kRegisters], RowState& state,
                                              const int (&row_local)[2], int lane) {
  static_assert(kOutRegisters <= kRegisters, "O registers");
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    if (row_local[r] >= w.geo.q_len) continue;
    const float inv = inverse_row_sum(state.row_sum[r]);
    const int64_t token = w.geo.q_start + row_local[r];
    __nv_bfloat16* out = p.o + token * p.o_token_stride + int64_t(w.head) * p.o_head_stride;
#pragma unroll
    for (int c = 0; c < kOutRegisters / 4; ++c) {
      const int i = 4 * c + 2 * r;
      *reinterpret_cast<uint32_t*>(out + 8 * c + 2 * (lane & 3)) =
          pack_bf16x2(o[i] * inv, o[i + 1] * inv);
    }
  }
  write_row_statistics(p, w, state, row_local, lane);
}

// O through shared memory (StagedRows): each warp stages its 16 rows of BF16 and copies them to
// O with 16-byte stores of whole rows instead of 16 bytes of each of 8 rows (measured with the
// timeline probe: the direct stores held the consumers for ~2 us per item). `staging` holds the
// consumer's rows; the caller alternates two staging tiles between items. The API guarantees O's
// 16-byte alignment (data and strides, memory_checks.cpp).
template <int kHeadDim, int kOutRegisters, int kRegisters>
__device__ __forceinline__ void write_outputs_staged(const ForwardParams& p, const WorkItem& w,
                                                     const float (&o)[kRegisters], RowState& state,
                                                     const int (&row_local)[2], int lane,
                                                     int consumer_row0, int first_row,
                                                     uint8_t* staging) {
  static_assert(kOutRegisters == kHeadDim / 2, "the accumulator holds the row's O");
  using Rows = StagedRows<kHeadDim>;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float inv = inverse_row_sum(state.row_sum[r]);
    const int row = first_row + 8 * r;  // within the consumer's rows
#pragma unroll
    for (int c = 0; c < kOutRegisters / 4; ++c) {
      const int i = 4 * c + 2 * r;
      Rows::store_pair(staging, row, c, 4 * (lane & 3), o[i] * inv, o[i + 1] * inv);
    }
  }
  write_row_statistics(p, w, state, row_local, lane);
  const int warp_row0 = first_row / Rows::kRowsPerWarp * Rows::kRowsPerWarp;
  Rows::copy_warp_rows(warp_row0, lane, [&](int row, int element, int at) {
    const int local = w.geo.q0 + consumer_row0 + row;
    if (local >= w.geo.q_len) return;
    const int64_t token = w.geo.q_start + local;
    __nv_bfloat16* out = p.o + token * p.o_token_stride + int64_t(w.head) * p.o_head_stride;
    *reinterpret_cast<uint4*>(out + element) = *reinterpret_cast<const uint4*>(staging + at);
  });
}

}  // namespace flamia::forward
