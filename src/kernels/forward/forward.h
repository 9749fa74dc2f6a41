// The FP8 forward attention kernel (sm_90a): reads the quantize pass's operands.
#pragma once

#include <cuda_runtime.h>

#include "common/layout.h"
#include "common/views.h"

namespace flamia {

// Fused quantization: the kernel's producer quantizes the BF16 inputs itself (no separate pass;
// docs/numerics.md §3 unchanged, bit for bit). Not with key smoothing; head dim 128. Measured
// slower than the separate pass on the H200 (docs/results-log.md), so only on request.
struct FusedQuantizeInputs {
  bool enabled = false;
  Bf16View q, k, v;
  ScaleMode scale_mode = ScaleMode::kExact;
};

struct ForwardKernelArgs {
  PackedShape shape;
  float softmax_scale = 1.0f;
  ForwardOperands in;
  Bf16MutableView o;
  float* lse = nullptr;                 // [heads_q][total_q]
  float* softmax_stats = nullptr;       // [heads_q][total_q][2] = {M, l}, or nullptr
  int32_t* device_status = nullptr;     // read (skip when non-zero); FUSED records an Inf there
  void* scheduler_workspace = nullptr;  // forward_scheduler_workspace_bytes(shape)
  // Tests only: every visible P̂ as e4m3_decode(P̂) * 2^(M_running - 8), [Hq][total_q][total_k].
  // Runs a separate (slower) instantiation of the kernel.
  float* debug_p_hat = nullptr;
  FusedQuantizeInputs fused;  // when enabled, `in` is not read
  // Scale mode kStatic: K̂'s and V̂'s exponent per KV head (the quantize pass's). Enabled: the
  // kernel without per-key factors in its softmax (forward_kernel's kStaticScales).
  StaticExponents static_exponents;
  // Part of the heads only (every tensor above keeps the whole problem's layout); not with
  // `fused` or `debug_p_hat`. The plan covers the range's heads (launch_forward_plan).
  HeadRange heads;
  int max_ctas = 0;         // persistent CTAs at most (0: one per SM)
  bool plan_ready = false;  // launch_forward_plan already ran for this range's head count
  // The launch before on the stream is a quantize pass (it writes nothing the plan reads): the
  // plan may start while it finishes (hopper/dependent_launch.cuh).
  bool plan_after_quantize_pass = false;
};

// Head dims with a fused-quantization kernel (128).
bool forward_supports_fused_quantize(int head_dim);

size_t forward_scheduler_workspace_bytes(const PackedShape& shape);
bool forward_supports_head_dim(int head_dim);
cudaError_t launch_forward(const ForwardKernelArgs& args, cudaStream_t stream);
// The plan alone (the work items of args.heads' head count), for launches with plan_ready.
cudaError_t launch_forward_plan(const ForwardKernelArgs& args, cudaStream_t stream);

}  // namespace flamia
