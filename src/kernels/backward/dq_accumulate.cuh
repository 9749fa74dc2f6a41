// Adding a CTA's dQ partial of one (query tile, head) into the FP32 dQ buffer, and the post-pass
// that converts that buffer to the BF16 output.
//
// Default: float2 atomics (red.global.add.v2.f32): fast, but the order of the additions from the
// key tiles of a document varies from run to run. Deterministic: the key tiles of a document
// add their partials to a query tile in increasing key-tile order, ordered by a semaphore per
// (head, query tile) that holds the index of the key tile whose turn it is. A CTA waits only on
// lower-indexed CTAs of the same (document, KV head), which the hardware dispatched before it,
// so the chain always progresses.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_params.h"
#include "kernels/backward/tile_factors.cuh"

namespace flamia::backward {

__device__ __forceinline__ int load_acquire(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int32_t* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// Where the deterministic order of one (head, query tile) is kept: the slot of the tile's first
// valid query (tiles of neighbouring documents may share a group of 16 rows, never a row).
__device__ __forceinline__ int32_t* dq_semaphore(const BackwardParams& p, const KeyTileItem& item,
                                                 int head, int q0) {
  return p.dq_semaphore + int64_t(head) * p.total_q + max(q0, item.span.q_start);
}

// Thread 0 waits for its turn; the barrier publishes the acquired order to the CTA.
__device__ __forceinline__ void wait_for_dq_turn(const int32_t* semaphore, int turn) {
  if (threadIdx.x == 0)
    while (load_acquire(semaphore) != turn) __nanosleep(64);
  __syncthreads();
}
__device__ __forceinline__ void pass_dq_turn(int32_t* semaphore, int next_turn) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) store_release(semaphore, next_turn);
}

// Runs `add` (the CTA's dQ additions to one (head, query tile)) in key tile `turn`'s turn.
template <typename Add>
__device__ __forceinline__ void in_dq_turn(int32_t* semaphore, int turn, Add&& add) {
  wait_for_dq_turn(semaphore, turn);
  add();
  pass_dq_turn(semaphore, turn + 1);
}

// dq: the warpgroup's m64n(D/2) partial of the tile (rows = queries q0 + 0..63, columns =
// d0 + 0..D/2-1); each row scaled by softmax_scale * 2^gq_i (qf.dq_scale) and added to the
// buffer [total_q][Hq][D]. Rows outside the document are never touched. kOrdered: plain
// read-add-write in the caller's turn (deterministic), else float2 atomics. One row pointer per
// row, so the thread's columns 8 c + 2 (lane & 3) are constant offsets from it.
template <int kHeadDim, bool kOrdered, int kRegisters>
__device__ __forceinline__ void add_dq_partial(const BackwardParams& p,
                                               const float (&dq)[kRegisters],
                                               const QueryFactors& qf, int head, int q0, int d0,
                                               int warp, int lane) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = 16 * warp + lane / 4 + 8 * r;
    if (qf.visibility[row] == kQueryOutside) continue;
    const float scale = qf.dq_scale[row];
    float* out = p.dq_accum + (int64_t(q0 + row) * p.heads_q + head) * kHeadDim + d0 +
                 register_column(lane, 0);
#pragma unroll
    for (int i = 0; i < kRegisters; i += 2) {
      if (register_row(i) != r) continue;
      float2* at = reinterpret_cast<float2*>(out + register_column_offset(i));
      // __fmul_rn: never contracted into the ordered path's addition, so both paths add the same
      // rounded products
      const float2 add = make_float2(__fmul_rn(dq[i], scale), __fmul_rn(dq[i + 1], scale));
      if constexpr (kOrdered) {
        float2 sum = __ldcg(at);
        sum.x += add.x;
        sum.y += add.y;
        __stcg(at, sum);
      } else {
        atomicAdd(at, add);
      }
    }
  }
}

// The atomic path in two halves, for an add deferred under later wgmma (backward_kernel.cuh):
// where the thread's rows go and their scales, the scaled partial (in registers that are no
// wgmma's accumulator), and later the reductions, predicated rather than branched.
struct DqRows {
  float* row[kRowsPerThread];  // the thread's first column in the buffer; nullptr: not added
  float scale[kRowsPerThread];
};

__device__ __forceinline__ DqRows no_dq_rows() {
  return DqRows{{nullptr, nullptr}, {0.0f, 0.0f}};
}

template <int kHeadDim>
__device__ __forceinline__ DqRows dq_rows(const BackwardParams& p, const QueryFactors& qf, int head,
                                          int q0, int d0, int warp, int lane) {
  DqRows rows;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = 16 * warp + lane / 4 + 8 * r;
    rows.scale[r] = qf.dq_scale[row];
    rows.row[r] = qf.visibility[row] == kQueryOutside
                      ? nullptr
                      : p.dq_accum + (int64_t(q0 + row) * p.heads_q + head) * kHeadDim + d0 +
                            register_column(lane, 0);
  }
  return rows;
}

// *at += {x, y} as one float2 reduction when `enabled`; predicated, not branched, so that it
// can sit between a wgmma's issue and its wait without ptxas serializing the wgmma (C7518).
__device__ __forceinline__ void reduce_add_v2_if(bool enabled, float* at, float x, float y) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.u32 p, %0, 0;\n"
      " @p red.global.add.v2.f32 [%1], {%2, %3};\n}\n" ::"r"(uint32_t(enabled)),
      "l"(at), "f"(x), "f"(y)
      : "memory");
}

template <int kRegisters>
__device__ __forceinline__ void scale_dq_partial(const float (&dq)[kRegisters], const DqRows& rows,
                                                 float (&scaled)[kRegisters]) {
#pragma unroll
  for (int i = 0; i < kRegisters; ++i) scaled[i] = __fmul_rn(dq[i], rows.scale[register_row(i)]);
}
// kOrdered: read-add-write in the caller's turn (deterministic); else predicated reductions.
template <bool kOrdered, int kRegisters>
__device__ __forceinline__ void add_scaled_dq_partial(const float (&scaled)[kRegisters],
                                                      const DqRows& rows) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const bool enabled = rows.row[r] != nullptr;
    if constexpr (kOrdered) {
      if (!enabled) continue;
    }
#pragma unroll
    for (int i = 0; i < kRegisters; i += 2) {
      if (register_row(i) != r) continue;
      float* at = rows.row[r] + register_column_offset(i);
      if constexpr (kOrdered) {
        float2 sum = __ldcg(reinterpret_cast<float2*>(at));
        sum.x += scaled[i];
        sum.y += scaled[i + 1];
        __stcg(reinterpret_cast<float2*>(at), sum);
      } else {
        reduce_add_v2_if(enabled, at, scaled[i], scaled[i + 1]);
      }
    }
  }
}

// Post-pass: FP32 dQ buffer -> BF16 output view, 8 values (two 16-byte loads, one 16-byte
// store; the API requires 16-byte aligned tensors and strides of multiples of 8 elements) per
// thread step. The buffer is read once: streaming loads. (Two float values per step, the first
// version, kept too few loads in flight to reach the memory's bandwidth.)
constexpr int kConvertValuesPerStep = 8;
template <int kHeadDim>
__global__ void convert_dq_kernel(const float* dq_accum, Bf16MutableView dq, int total_q,
                                  int heads_q, const int32_t* device_status) {
  if (device_status != nullptr && *device_status != 0) return;
  constexpr int kStepsPerRow = kHeadDim / kConvertValuesPerStep;
  const int64_t steps = int64_t(total_q) * heads_q * kStepsPerRow;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < steps;
       x += int64_t(gridDim.x) * blockDim.x) {
    const int d = int(x % kStepsPerRow) * kConvertValuesPerStep;
    const int64_t row = x / kStepsPerRow;  // token * heads_q + head
    const int head = int(row % heads_q);
    const int64_t token = row / heads_q;
    const float4* in = reinterpret_cast<const float4*>(dq_accum + row * kHeadDim + d);
    const float4 lo = __ldcs(in);
    const float4 hi = __ldcs(in + 1);
    __nv_bfloat162 out[kConvertValuesPerStep / 2] = {
        __floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
        __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
    __nv_bfloat16* at = static_cast<__nv_bfloat16*>(dq.data) + token * dq.token_stride +
                        int64_t(head) * dq.head_stride + d;
    *reinterpret_cast<uint4*>(at) = *reinterpret_cast<const uint4*>(out);
  }
}

}  // namespace flamia::backward
