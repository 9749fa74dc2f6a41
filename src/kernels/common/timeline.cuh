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

// Counters (timeline.h): cycles summed over the CTA in shared words, each written by one thread
// only; the last word holds the lap clock (lap: cycles since the previous lap).
__device__ __forceinline__ unsigned long long* counters() {
  __shared__ unsigned long long words[kCounters + 1];
  return words;
}
__device__ __forceinline__ void reset_counter(Counter c) {
  counters()[c] = 0;
}
__device__ __forceinline__ unsigned long long start_wait() {
  return sm_clock();
}
__device__ __forceinline__ void end_wait(Counter c, unsigned long long since) {
  counters()[c] += sm_clock() - since;
}
__device__ __forceinline__ void lap_start() {
  counters()[kCounters] = sm_clock();
}
__device__ __forceinline__ void lap(Counter c) {
  const unsigned long long now = sm_clock();
  counters()[c] += now - counters()[kCounters];
  counters()[kCounters] = now;
}
__device__ __forceinline__ void record_counter(int slot, Counter c) {
  if (slot >= 0 && slot < kSlots) g_stamps[slot][kFirstCounterEvent + c] = counters()[c];
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
__device__ __forceinline__ void reset_counter(Counter) {}
__device__ __forceinline__ unsigned long long start_wait() {
  return 0;
}
__device__ __forceinline__ void end_wait(Counter, unsigned long long) {}
__device__ __forceinline__ void lap_start() {}
__device__ __forceinline__ void lap(Counter) {}
__device__ __forceinline__ void record_counter(int, Counter) {}
#endif

}  // namespace flamia::timeline
