// Definition of launch_backward_kernel, included by the per-precision instantiation units.
#pragma once

#include "kernels/backward/backward_kernel.cuh"
#include "kernels/backward/backward_kernel_launch.h"

namespace flamia::backward {

template <int kHeadDim, bool kBf16Grad>
cudaError_t launch_backward_kernel(const BackwardParams& params, dim3 grid, cudaStream_t stream) {
  constexpr size_t kSmemBytes = backward_smem_bytes<kHeadDim, kBf16Grad>();
  auto* kernel = backward_kernel<kHeadDim, kBf16Grad>;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  if (error != cudaSuccess) return error;
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flamia::backward
