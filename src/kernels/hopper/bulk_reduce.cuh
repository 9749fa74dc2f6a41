// Bulk asynchronous reductions from shared to global memory (cp.reduce.async.bulk, sm_90): the
// TMA unit reads `bytes` contiguous bytes of shared memory and adds them element-wise into
// global memory (each element an atomic add), while the issuing thread goes on. The backward's
// dQ partials reach the FP32 dQ buffer this way (dq_accumulate.cuh).
//
// Ordering: the shared-memory source is written by ordinary (generic-proxy) stores, so each
// writer fences with fence_proxy_async_shared() and a barrier orders the writers before the
// issuing thread. The issuing thread must not let the source be rewritten before
// bulk_wait_source_read() says the unit has read it, and must call bulk_wait_all() before the
// CTA exits.
#pragma once

#include <cstdint>

#include "kernels/hopper/sync.cuh"

namespace flamia::hopper {

constexpr int kBulkAlignment = 16;  // source, destination and size: multiples of 16 bytes

__device__ __forceinline__ void bulk_reduce_add_f32(float* global_dst, const float* smem_src,
                                                    uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   global_dst),
               "r"(smem_addr(smem_src)), "r"(bytes)
               : "memory");
}

// Closes this thread's bulk operations issued since the last commit into one group.
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until the sources of all of this thread's committed groups have been read (the shared
// memory may then be rewritten; the global additions may still be in flight).
__device__ __forceinline__ void bulk_wait_source_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Waits until all of this thread's committed groups have completed.
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

}  // namespace flamia::hopper
