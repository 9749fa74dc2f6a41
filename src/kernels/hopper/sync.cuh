// Synchronisation primitives of sm_90: mbarriers (with TMA transaction counts), named barriers,
// proxy fences, and warpgroup register reallocation.
#pragma once

#include <cstdint>

namespace flamia::hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// ---- mbarrier ---------------------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives and announces `bytes` of TMA transactions that must land before the phase completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(phase)
      : "memory");
}

// ---- named barriers (0 is __syncthreads) ---------------------------------------------------
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Ordinary shared-memory stores that the async proxy (wgmma, TMA) reads next.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Orders this thread's generic-proxy accesses of global memory (an acquired flag) before its
// later async-proxy operations on global memory (bulk reductions).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// ---- warpgroup register budgets (need __launch_bounds__(threads, 1)) --------------------------
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

__device__ __forceinline__ int warp_index_uniform() {
  return __shfl_sync(0xffffffffu, int(threadIdx.x) / 32, 0);
}

// The thread's warpgroup (128 threads), broadcast from lane 0 so that ptxas knows it is
// warp-uniform: what derives from it (a forward consumer's rows and loop bound) then lives in
// uniform registers. Computed from threadIdx.x directly, the consumers' per-band loop bound took
// a vector register and spilled them (up to 632 bytes at head dim 64).
__device__ __forceinline__ int warpgroup_index_uniform() {
  constexpr int kWarpgroupThreadCount = 128;
  return __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroupThreadCount, 0);
}

}  // namespace flamia::hopper
