// Programmatic dependent launch (sm_90): a kernel launched with `Launch::kEarly` may become
// resident while the kernel before it on the stream is still running, once every CTA of that one
// has called allow_dependent_launch() (or exited).
//
// The rules every early kernel of flamia follows, so that stream order still holds for everything
// after it:
// - It calls wait_for_prior_grids() before it exits, on every path. That wait returns when the
//   kernel before it has completed and its memory is visible, so the early kernel's completion
//   still implies its predecessor's, and a later ordinary launch waits for both.
// - Before that wait it touches no memory the kernel before it writes, and writes none that
//   kernel reads. Most early kernels wait first (they gain the launch latency); the schedule plans
//   do their whole work first (they read only cu_seqlens and the device status, which kernels two
//   or more launches earlier wrote), and are launched early only right after a quantize pass.
//   The one exception: that quantize pass may still raise the status (an Inf input, numerics §7)
//   while a plan reads it. Either value is harmless: a plan that read 0 plans the items, and the
//   attention kernels read the status again after their own wait and skip them.
// Kernels that may have an early successor call allow_dependent_launch() when they start.
// Without the launch attribute both instructions are no-ops.
#pragma once

#include "kernels/hopper/dependent_launch.h"

namespace flamia::hopper {

__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

__device__ __forceinline__ void wait_for_prior_grids() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

}  // namespace flamia::hopper
