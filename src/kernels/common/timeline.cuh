// Device side of the timeline probe (timeline.h). Without FLAMIA_TIMELINE every call is empty.
// Each translation unit that includes it with the option on has its own stamp array; the
// kernel's unit defines the host accessors with FLAMIA_TIMELINE_ACCESSORS.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/timeline.h"

namespace flamia::timeline {

#if FLAMIA_TIMELINE
static __device__ unsigned long long g_stamps[kSlots][kEvents];

__device__ __forceinline__ unsigned long long sm_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ void stamp(int slot, int event) {
  if (slot >= 0 && slot < kSlots) g_stamps[slot][event] = sm_clock();
}
// The last event: the SM and a count (steps or key tiles).
__device__ __forceinline__ void record_place(int slot, int count) {
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (slot >= 0 && slot < kSlots)
    g_stamps[slot][kEvents - 1] = (uint64_t(sm) << 32) | uint32_t(count);
}

// Cycles one thread spends in a wait, summed over the CTA in a shared word of its own.
__device__ __forceinline__ unsigned long long* wait_totals() {
  __shared__ unsigned long long totals[kWaitCounters];
  return totals;
}
__device__ __forceinline__ void reset_wait(WaitCounter c) {
  wait_totals()[c] = 0;
}
__device__ __forceinline__ unsigned long long start_wait() {
  return sm_clock();
}
__device__ __forceinline__ void end_wait(WaitCounter c, unsigned long long since) {
  wait_totals()[c] += sm_clock() - since;
}
__device__ __forceinline__ void record_wait(int slot, int event, WaitCounter c) {
  if (slot >= 0 && slot < kSlots) g_stamps[slot][event] = wait_totals()[c];
}

#define FLAMIA_TIMELINE_ACCESSORS(kernel)                                                \
  void reset_##kernel() {                                                                \
    static unsigned long long zeros[kSlots][kEvents];                                    \
    cudaMemcpyToSymbol(g_stamps, zeros, sizeof(zeros));                                  \
  }                                                                                      \
  void copy_##kernel(uint64_t* host) {                                                   \
    cudaMemcpyFromSymbol(host, g_stamps, sizeof(unsigned long long) * kSlots * kEvents); \
  }
#else
__device__ __forceinline__ void stamp(int, int) {}
__device__ __forceinline__ void record_place(int, int) {}
__device__ __forceinline__ void reset_wait(WaitCounter) {}
__device__ __forceinline__ unsigned long long start_wait() {
  return 0;
}
__device__ __forceinline__ void end_wait(WaitCounter, unsigned long long) {}
__device__ __forceinline__ void record_wait(int, int, WaitCounter) {}
#endif

}  // namespace flamia::timeline
