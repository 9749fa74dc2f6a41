// 16-byte asynchronous global -> shared copies (cp.async, sm_80+): the quantize kernel parks
// its input tile in shared memory this way, so that no registers hold it while the exponents
// are found (holding it in registers made ptxas spill it right after the loads).
#pragma once

#include <cstdint>

namespace flamia::quantize {

constexpr int kAsyncCopyBytes = 16;

// Copies 16 bytes, or writes 16 zero bytes when !valid (the source is then not read).
__device__ __forceinline__ void async_copy_16(void* smem_dst, const void* global_src, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  const int src_bytes = valid ? kAsyncCopyBytes : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(global_src),
               "n"(kAsyncCopyBytes), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void async_copy_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits for all of this thread's copies; their data is then visible to this thread.
__device__ __forceinline__ void async_copy_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

}  // namespace flamia::quantize
