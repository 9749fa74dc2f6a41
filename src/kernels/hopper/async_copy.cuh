// 16-byte asynchronous global -> shared copies (cp.async, sm_80+): the backward's operand tiles
// (the copies of the next step are issued before the current step's products and land while
// they run, without holding the data in registers: the dK and dV accumulators leave no room
// for that), and the BF16 rows the fused forward producer quantizes (fused_quantize.cuh).
//
// cp.async writes shared memory through the generic proxy, as the issuing thread's own store:
// after async_copy_wait_all() the issuing thread may patch what it copied (the byte masks of
// token-major tiles), and then, like every writer of a tile that wgmma reads,
// fence.proxy.async + a barrier make it visible to the MMAs.
#pragma once

#include <cstdint>

#include "kernels/hopper/sync.cuh"

namespace flamia::hopper {

constexpr int kAsyncCopyBytes = 16;

// Copies 16 bytes, or writes 16 zero bytes when !valid (the source is then not read; it must
// still be a valid address expression, so callers pass an in-bounds base).
__device__ __forceinline__ void async_copy_16(void* smem_dst, const void* global_src, bool valid) {
  const int src_bytes = valid ? kAsyncCopyBytes : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem_dst)),
               "l"(global_src), "n"(kAsyncCopyBytes), "r"(src_bytes)
               : "memory");
}

// 4- or 8-byte copies (cp.async.ca: .cg takes 16 bytes only) of per-query factor inputs;
// zero-filled when !valid.
template <int kBytes>
__device__ __forceinline__ void async_copy_small(void* smem_dst, const void* global_src,
                                                 bool valid) {
  static_assert(kBytes == 4 || kBytes == 8, "cp.async.ca sizes used here");
  const int src_bytes = valid ? kBytes : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem_dst)),
               "l"(global_src), "n"(kBytes), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void async_copy_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits for all of this thread's copies; their data is then visible to this thread.
__device__ __forceinline__ void async_copy_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void async_copy_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace flamia::hopper
