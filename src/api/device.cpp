// The sm_90 device requirement (device.h).
#include "api/device.h"

#include <cuda_runtime.h>

#include "api/errors.h"

namespace flamia::api {
namespace {

// sm_90a ("architecture-specific") code runs on compute capability 9.0 only.
constexpr int kRequiredMajor = 9;
constexpr int kRequiredMinor = 0;

flamia_status no_device(const char* where, const char* call, cudaError_t error) {
  cudaGetLastError();  // do not leave our failed query as the caller's pending CUDA error
  return fail(FLAMIA_ERROR_NO_DEVICE,
              "%s: no usable CUDA device (%s: %s); flamia needs an sm_90 "
              "(Hopper) GPU",
              where, call, cudaGetErrorString(error));
}

}  // namespace

flamia_status require_sm90_device(const char* where) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return no_device(where, "cudaGetDeviceCount", error);
  if (count == 0) {
    return fail(FLAMIA_ERROR_NO_DEVICE,
                "%s: no CUDA device found; flamia needs an sm_90 (Hopper) "
                "GPU",
                where);
  }
  int device = 0;
  error = cudaGetDevice(&device);
  if (error != cudaSuccess) return no_device(where, "cudaGetDevice", error);
  int major = 0;
  int minor = 0;
  error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  }
  if (error != cudaSuccess) return no_device(where, "cudaDeviceGetAttribute", error);
  if (major != kRequiredMajor || minor != kRequiredMinor) {
    return fail(FLAMIA_ERROR_NO_DEVICE,
                "%s: the current CUDA device %d has compute capability %d.%d; flamia's kernels "
                "are built for sm_90a and need a compute capability 9.0 (Hopper) GPU",
                where, device, major, minor);
  }
  return FLAMIA_OK;
}

}  // namespace flamia::api
