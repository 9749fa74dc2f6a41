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

constexpr int kSlots = 1 << 16;  // work items (forward) or CTAs (backward) recorded
constexpr int kEvents = 10;      // stamps per slot; the last holds smid << 32 | a count
// Waits summed over a CTA (cycles; the backward's events 7 and 8).
enum WaitCounter { kHandOffFree, kHandOffFull, kWaitCounters };

#if FLAMIA_TIMELINE
// Zero the stamps of the kernel, and copy them out (kSlots * kEvents values) after a launch.
void reset_forward();
void copy_forward(uint64_t* host);
void reset_backward();
void copy_backward(uint64_t* host);
#endif

}  // namespace flamia::timeline
