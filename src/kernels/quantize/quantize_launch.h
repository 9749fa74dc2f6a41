// Host side of the quantize pass: validating and launching one TensorJob, and the small
// helpers the forward and backward job builders share.
#pragma once

#include <cuda_runtime.h>

#include "common/views.h"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

inline TensorSource to_source(const Bf16View& view) {
  return {static_cast<const uint16_t*>(view.data), view.token_stride, view.head_stride};
}
inline BlockKind blocks_of(ScaleMode mode) {
  return mode == ScaleMode::kBlock32 ? BlockKind::kBlock32 : BlockKind::kToken;
}
inline Transform transform_of(KeySmoothing smoothing) {
  switch (smoothing) {
    case KeySmoothing::kFirstKey:
      return Transform::kSubtractFirstKey;
    case KeySmoothing::kVector:
      return Transform::kSubtractVector;
    case KeySmoothing::kNone:
    default:
      return Transform::kIdentity;
  }
}
inline bool has_outputs(const CopySpec& copy) {
  return copy.row_major != nullptr || copy.token_major != nullptr || copy.exponents[0] != nullptr ||
         copy.exponents[1] != nullptr || copy.amax_out != nullptr;
}

// Appends `copy` to the job if it writes anything (or `keep`).
inline void add_copy(TensorJob& job, const CopySpec& copy, bool keep = false) {
  if ((keep || has_outputs(copy)) && job.num_copies < kMaxCopies) job.copy[job.num_copies++] = copy;
}

// Validates every job (pointers, alignment, strides; cudaErrorInvalidValue before anything is
// launched), fills needs_documents, then launches those that have something to write.
// Jobs the register kernels take (token_scale_kernel.cuh, also as a body inside a mixed launch
// of the general kernel; gradient_token_kernel.cuh for the dO job) run on them unless
// `general_kernel_only` (tests compare the kernels' bytes): up to two launches, one after the
// other (the plain jobs, then each gradient job); an error from a later launch
// returns with the earlier ones' outputs written (the caller reports the call as failed).
cudaError_t launch_tensor_jobs(TensorJob* jobs, int count, int head_dim, cudaStream_t stream,
                               bool general_kernel_only = false);

}  // namespace flamia::quantize
