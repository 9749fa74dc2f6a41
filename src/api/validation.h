// Host-side argument validation of the C API. Every check returns at once with a status and a
// message naming the offending argument (errors.h). Nothing here touches a GPU, so every
// argument error is reachable (and tested) on machines without one.
//
// Order (the first failing check is reported):
//   1. args (and the size query's output pointer) non-null
//   2. the problem's scalars: batch, totals, heads, head_dim > 0, max_seqlens, softmax_scale,
//      causal flag, enums (and the backward's precision and deterministic flag)  [INVALID_ARGUMENT]
//   3. what flamia does not implement: head dims the kernels lack, causal with
//      total_q != total_k, kv_amax with keys but no queries                       [UNSUPPORTED]
//   4. the problem's pointers: cu_seqlens, host copies, key smoothing vector   [INVALID_ARGUMENT]
//   5. tensors: data, 16-byte alignment, strides, extent within the address space,
//      self-overlapping outputs, LSE, softmax stats
//                                                                              [INVALID_ARGUMENT]
//   6. saved_operands (when given): 256-byte aligned, large enough            [INVALID_ARGUMENT]
//      (not with FUSED, nor with FP8_BF16GRAD: checked in step 3             [UNSUPPORTED])
//      workspace: NULL, not 256-byte aligned, too small                       [WORKSPACE]
//      saved_operands overlapping the workspace                               [INVALID_ARGUMENT]
//   7. host cu_seqlens contents, when given                                   [INVALID_SEQLENS]
// The entry points then return early for empty problems and check the device (device.h).
#pragma once

#include "flamia/flamia.h"

namespace flamia::api {

// Steps 2-3 for flamia_saved_operands_size: the sizes and a supported head dim.
flamia_status validate_saved_operands_problem(const flamia_problem& problem, const char* where);

// Steps 2-3: all a workspace size query or a path description needs (no pointer is read).
flamia_status validate_forward_problem(const flamia_forward_args& args, const char* where);
flamia_status validate_backward_problem(const flamia_backward_args& args, const char* where);

// Steps 1-7.
flamia_status validate_forward_args(const flamia_forward_args* args, const char* where);
flamia_status validate_backward_args(const flamia_backward_args* args, const char* where);

}  // namespace flamia::api
