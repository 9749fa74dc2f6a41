// Kernel launches with or without programmatic dependent launch (the device side and the rules
// an early kernel follows: dependent_launch.cuh).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace flamia::hopper {

enum class Launch : bool {
  kInOrder = false,  // after the kernel before it on the stream has completed
  kEarly = true,     // programmatic stream serialization (dependent_launch.cuh's rules)
};

template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                          cudaStream_t stream, Launch launch, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute early[1];
  early[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early[0].val.programmaticStreamSerializationAllowed = 1;
  if (launch == Launch::kEarly) {
    config.attrs = early;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace flamia::hopper
