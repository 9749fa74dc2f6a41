// Host-side launch of one compiled backward kernel variant (instantiated per precision in
// backward_kernel_fp8.cu and backward_kernel_bf16grad.cu).
#pragma once

#include <cuda_runtime.h>

#include "kernels/backward/backward_params.h"

namespace flamia::backward {

template <int kHeadDim, bool kBf16Grad>
cudaError_t launch_backward_kernel(const BackwardParams& params, dim3 grid, cudaStream_t stream);

}  // namespace flamia::backward
