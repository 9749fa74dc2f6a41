// Probe instrumentation, off in every production build: with the CMake option FLAMIA_TIMELINE
// the forward and backward kernels record SM clock stamps (clock64) at the boundaries of each
// work item, so that a benchmark can show where a CTA's time goes between its steps (what the
// per-item fixed cost of bench/item_overhead.py is made of). bench_forward_kernel and
// bench_backward_kernel write them out (FLAMIA_TIMELINE_OUT); bench/timeline_report.py reads
// them. The events of each kernel: forward_kernel.cuh, backward_kernel.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flamia::timeline {

#ifndef FLAMIA_TIMELINE
#define FLAMIA_TIMELINE 0
#endif
// Whether the probe is compiled in: the kernels guard its calls with it (if constexpr), so that
// a production build compiles exactly the kernels it would without the probe.
constexpr bool kEnabled = FLAMIA_TIMELINE != 0;
constexpr int kSlots = 1 << 16;  // work items (forward) or CTAs (backward) recorded
constexpr int kEvents = 16;      // stamps per slot; the last holds smid << 32 | a count
// Cycles summed over a CTA (the backward's events kFirstCounterEvent + counter): the waits for
// the hand-off buffers, and the phases of the key warpgroups' steps (their first thread).
enum Counter {
  kHandOffFree,        // key warpgroups: waiting for a free hand-off buffer
  kHandOffFull,        // dQ warpgroup: waiting for a full one
  kStepScoreProducts,  // step start (next loads issued) to Sᵀ and dPᵀ's first half landed
  kStepFirstHalf,      // P̂ rebuild and dS of the first 32 queries
  kStepSecondProduct,  // dPᵀ's second half, issue to wait
  kStepSecondHalf,     // dS of the last 32 queries
  kStepGradients,      // Ĥ, rescales, dV and dK products, hand-off, their wait
  kStepLoads,          // the next step's loads landed and the key warpgroups' barrier
  kCounters
};
constexpr int kFirstCounterEvent = 7;
static_assert(kFirstCounterEvent + kCounters < kEvents, "counters fit before the last event");

#if FLAMIA_TIMELINE
// Zero the stamps of the kernel, and copy them out (kSlots * kEvents values) after a launch.
void reset_forward();
void copy_forward(uint64_t* host);
void reset_backward();
void copy_backward(uint64_t* host);
#endif

}  // namespace flamia::timeline
