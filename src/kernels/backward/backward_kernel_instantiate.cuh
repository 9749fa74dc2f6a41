// Definition of launch_backward_kernel, included by the per-precision instantiation units.
#pragma once

#include "kernels/backward/backward_kernel.cuh"
#include "kernels/backward/backward_kernel_launch.h"
#include "kernels/hopper/dependent_launch.cuh"

namespace flamia::backward {

// The debug-P̂ instantiations run only when the caller asks for P̂ (tests); the windowed ones only
// for a sliding window; the static ones for scale mode kStatic.
template <int kHeadDim, bool kBf16Grad, bool kStaticScales>
auto* select_backward_kernel(const BackwardParams& params) {
  const bool debug = params.debug_p_hat != nullptr, windowed = params.sliding_window > 0;
  return debug ? (windowed ? backward_kernel<kHeadDim, kBf16Grad, true, true, kStaticScales>
                           : backward_kernel<kHeadDim, kBf16Grad, true, false, kStaticScales>)
               : (windowed ? backward_kernel<kHeadDim, kBf16Grad, false, true, kStaticScales>
                           : backward_kernel<kHeadDim, kBf16Grad, false, false, kStaticScales>);
}

template <int kHeadDim, bool kBf16Grad>
cudaError_t launch_backward_kernel(const BackwardParams& params, dim3 grid, cudaStream_t stream) {
  constexpr size_t kSmemBytes = backward_smem_bytes<kHeadDim, kBf16Grad>();
  auto* kernel = params.static_key_exp != nullptr
                     ? select_backward_kernel<kHeadDim, kBf16Grad, true>(params)
                     : select_backward_kernel<kHeadDim, kBf16Grad, false>(params);
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  if (error != cudaSuccess) return error;
  // Launched early: it waits for the kernels before it first (backward_kernel).
  return hopper::launch_kernel(kernel, grid, dim3(kCtaThreads<kBf16Grad>), kSmemBytes, stream,
                               hopper::Launch::kEarly, params);
}

}  // namespace flamia::backward
