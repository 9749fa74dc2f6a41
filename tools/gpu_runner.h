// The GPU path of the demo: runs flamia through its public C API (include/flamia/flamia.h) on
// the reference's problem and inputs. Kept apart from the CPU-only code.
#pragma once

#include <string>
#include <vector>

#include "reference/attention_ref.h"
#include "reference/audit.h"

namespace flamia::cli {

struct GpuDevice {
  bool usable = false;      // a device of compute capability 9.0 is present
  std::string description;  // name and capability, or why there is none
};
GpuDevice probe_gpu();

struct GpuRun {
  bool ok = false;
  std::string error;                         // the failing call and flamia's message
  std::string path;                          // flamia_describe_forward
  std::vector<float> o, lse, softmax_stats;  // BF16 O converted to FP32
  std::vector<float> dq, dk, dv;             // BF16 gradients converted to FP32
  double forward_ms = 0.0;                   // mean over the timed repeats
  double backward_ms = 0.0;
  bool with_backward = false;
};

// One forward (+ backward when `backward` is set) with poisoned outputs, checked, then
// `repeats` timed repetitions of each.
GpuRun run_gpu(const ref::Problem& problem, const ref::Inputs& inputs, bool backward,
               BackwardPrecision precision, int repeats);

// The GPU forward as an audit forward (throws std::runtime_error on a failed call).
ref::AuditForward gpu_audit_forward();

}  // namespace flamia::cli
