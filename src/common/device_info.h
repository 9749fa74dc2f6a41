// What the host reads about the current device, in one place for the dispatch and the launchers.
#pragma once

#include <cuda_runtime.h>

namespace flamia {

// The current device's SM count (132 on an H200), or 0 when it cannot be read.
inline int current_multiprocessors() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  return count;
}

}  // namespace flamia
