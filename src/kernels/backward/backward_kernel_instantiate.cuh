// Definition of launch_backward_kernel, included by the per-precision instantiation units.
#pragma once

#include "kernels/backward/backward_kernel.cuh"
#include "kernels/backward/backward_kernel_launch.h"

namespace flamia::backward {

// The debug-P̂ instantiation runs only when the caller asks for P̂ (tests).
template <int kHeadDim, bool kBf16Grad>
cudaError_t launch_backward_kernel(const BackwardParams& params, dim3 grid, cudaStream_t stream) {
  constexpr size_t kSmemBytes = backward_smem_bytes<kHeadDim, kBf16Grad>();
  auto* kernel = params.debug_p_hat != nullptr ? backward_kernel<kHeadDim, kBf16Grad, true>
                                               : backward_kernel<kHeadDim, kBf16Grad, false>;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  if (error != cudaSuccess) return error;
  kernel<<<grid, kCtaThreads<kBf16Grad>, kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flamia::backward
