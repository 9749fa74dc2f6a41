// The one place that maps the public structs to the internal launcher arguments, and the launch
// sequences of the two passes. Called only with validated arguments on an sm_90 device.
#pragma once

#include "api/overlap.h"
#include "api/seqlens_rules.h"
#include "api/workspace.h"
#include "common/layout.h"
#include "flamia/flamia.h"

namespace flamia::api {

PackedShape packed_shape(const flamia_problem& problem);
// Elements of flamia_forward_args.kv_amax: K's then V's amax per KV head.
constexpr int kKvAmaxRows = 2;
inline int64_t kv_amax_count(const flamia_problem& p) {
  return kKvAmaxRows * int64_t(p.heads_kv);
}
SeqlensLimits seqlens_limits(const flamia_problem& problem);
WorkspaceRequest forward_workspace_request(const flamia_forward_args& args);
WorkspaceRequest backward_workspace_request(const flamia_backward_args& args);

// Whether the forward quantizes inside its kernel (args.quantize) instead of in a separate pass
// first.
bool forward_fuses_quantize(const flamia_forward_args& args);

// How the forward overlaps its quantize pass with its attention (overlap.h; none when fused,
// or on a device whose SMs cannot be read), from FLAMIA_FORWARD_OVERLAP or the default plan.
OverlapPlan forward_overlap_plan(const flamia_forward_args& args);

// Forward: seqlens check -> quantize -> forward kernel -> poison (on args.stream, no host sync;
// the quantize pass and the attention per chunk of heads on internal streams where
// forward_overlap_plan says so).
flamia_status dispatch_forward(const flamia_forward_args& args, const char* where);
// Backward: seqlens check -> one quantize pass (forward and backward operands) -> backward
// kernels -> poison.
flamia_status dispatch_backward(const flamia_backward_args& args, const char* where);

}  // namespace flamia::api
