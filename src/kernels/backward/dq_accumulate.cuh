// Adding a CTA's dQ partial of one (query tile, head) into the FP32 dQ buffer, and the post-pass
// that converts that buffer to the BF16 output. (The FP8 path's dQ warpgroup adds through bulk
// reductions from shared memory instead, dq_warpgroup.cuh, with the same deterministic order.)
//
// BF16grad: float2 atomics (red.global.add.v2.f32): fast, but the order of the additions from the
// key tiles of a document varies from run to run. Deterministic: the key tiles of a document
// add their partials to a query tile in increasing key-tile order, ordered by a semaphore per
// (head, query tile) that holds the index of the key tile whose turn it is (counted from the first
// key tile the query tile sees, dq_turn). A CTA waits only on
// lower-indexed CTAs of the same (document, KV head), which the hardware dispatched before it,
// so the chain always progresses.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_params.h"
#include "kernels/backward/dq_buffer.h"
#include "kernels/backward/tile_factors.cuh"
#include "kernels/hopper/dependent_launch.cuh"
#include "kernels/hopper/sync.cuh"

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

// The CTA's turn in the deterministic order of query tile q0: its key tile's place among the key
// tiles that query tile sees (from first_key_tile_seen: tile 0 without a sliding window).
__device__ __forceinline__ int dq_turn(const BackwardParams& p, const KeyTileItem& item, int q0,
                                       int window) {
  return item.tile - first_key_tile_seen(item, q0, p.causal != 0, window);
}

// The threads of a CTA that add its dQ partials: the whole CTA (BF16grad) or the FP8 path's dQ
// warpgroup (named barrier kDqWarpgroupBarrier).
struct DqAdders {
  int leader;   // threadIdx.x of the first
  int barrier;  // 0: __syncthreads
  int threads;

  __device__ __forceinline__ void sync() const {
    if (barrier == 0)
      __syncthreads();
    else
      hopper::named_barrier_sync(barrier, threads);
  }
};

// The leader waits for the turn; the barrier publishes the acquired order to the adders.
__device__ __forceinline__ void wait_for_dq_turn(const int32_t* semaphore, int turn,
                                                 const DqAdders& adders) {
  if (int(threadIdx.x) == adders.leader)
    while (load_acquire(semaphore) != turn) __nanosleep(64);
  adders.sync();
}
__device__ __forceinline__ void pass_dq_turn(int32_t* semaphore, int next_turn,
                                             const DqAdders& adders) {
  __threadfence();
  adders.sync();
  if (int(threadIdx.x) == adders.leader) store_release(semaphore, next_turn);
}

// Runs `add` (the CTA's dQ additions to one (head, query tile)) in key tile `turn`'s turn.
template <typename Add>
__device__ __forceinline__ void in_dq_turn(int32_t* semaphore, int turn, const DqAdders& adders,
                                           Add&& add) {
  wait_for_dq_turn(semaphore, turn, adders);
  add();
  pass_dq_turn(semaphore, turn + 1, adders);
}

// dq: a warpgroup's m64nN partial of the tile (rows = queries q0 + 0..63, columns d0 + 0..N-1),
// each of the thread's two rows scaled by row_scale[r] (softmax_scale * 2^gq_i; BF16grad:
// softmax_scale) and added to the dQ buffer (dq_buffer.h); rows with !row_visible[r] (outside
// the document) are never touched. kOrdered: plain read-add-write in the caller's turn
// (deterministic), else float2 atomics. One row pointer per row, so the thread's columns
// 8 c + 2 (lane & 3) are constant offsets from it.
template <int kHeadDim, bool kOrdered, int kRegisters>
__device__ __forceinline__ void add_dq_rows(const BackwardParams& p, const float (&dq)[kRegisters],
                                            const float (&row_scale)[kRowsPerThread],
                                            const bool (&row_visible)[kRowsPerThread], int head,
                                            int q0, int d0, int warp, int lane) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = 16 * warp + lane / 4 + 8 * r;
    if (!row_visible[r]) continue;
    const float scale = row_scale[r];
    float* out = p.dq_accum + dq_buffer_row(head, q0 + row, p.total_q, kHeadDim) + d0 +
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

// The same with the rows' scales and visibility from the step's query factors (BF16grad).
template <int kHeadDim, bool kOrdered, int kRegisters>
__device__ __forceinline__ void add_dq_partial(const BackwardParams& p,
                                               const float (&dq)[kRegisters],
                                               const QueryFactors& qf, int head, int q0, int d0,
                                               int warp, int lane) {
  const int row0 = 16 * warp + lane / 4;
  const float scale[kRowsPerThread] = {qf.dq_scale[row0], qf.dq_scale[row0 + 8]};
  const bool visible[kRowsPerThread] = {qf.visibility[row0] != kQueryOutside,
                                        qf.visibility[row0 + 8] != kQueryOutside};
  add_dq_rows<kHeadDim, kOrdered>(p, dq, scale, visible, head, q0, d0, warp, lane);
}

// Post-pass: FP32 dQ buffer -> BF16 output view, 8 values (two 16-byte loads, one 16-byte
// store; the API requires 16-byte aligned tensors and strides of multiples of 8 elements) per
// thread step, in the buffer's order (head-major, dq_buffer.h). The buffer is read once:
// streaming loads. (Two float values per step, the first version, kept too few loads in flight
// to reach the memory's bandwidth.)
constexpr int kConvertValuesPerStep = 8;
template <int kHeadDim>
__global__ void convert_dq_kernel(const float* dq_accum, Bf16MutableView dq, int total_q,
                                  int heads_q, const int32_t* device_status) {
  hopper::wait_for_prior_grids();  // launched early (backward_launch.cu)
  if (device_status != nullptr && *device_status != 0) return;
  constexpr int kStepsPerRow = kHeadDim / kConvertValuesPerStep;
  const int64_t steps = int64_t(total_q) * heads_q * kStepsPerRow;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < steps;
       x += int64_t(gridDim.x) * blockDim.x) {
    const int d = int(x % kStepsPerRow) * kConvertValuesPerStep;
    const int64_t row = x / kStepsPerRow;  // head * total_q + token
    const int token = int(row % total_q);
    const int head = int(row / total_q);
    const float4* in = reinterpret_cast<const float4*>(
        dq_accum + dq_buffer_row(head, token, total_q, kHeadDim) + d);
    const float4 lo = __ldcs(in);
    const float4 hi = __ldcs(in + 1);
    __nv_bfloat162 out[kConvertValuesPerStep / 2] = {
        __floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
        __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
    __nv_bfloat16* at = static_cast<__nv_bfloat16*>(dq.data) + int64_t(token) * dq.token_stride +
                        int64_t(head) * dq.head_stride + d;
    *reinterpret_cast<uint4*>(at) = *reinterpret_cast<const uint4*>(out);
  }
}

}  // namespace flamia::backward
