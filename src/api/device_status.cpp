// flamia_check_device_status: the one synchronizing call, made by the caller when it wants to
// know whether the device-side cu_seqlens check of the latest call on a workspace failed.
#include <cuda_runtime.h>

#include <cstdint>

#include "api/device.h"
#include "api/device_status.h"
#include "api/errors.h"
#include "api/saved_operands.h"
#include "api/seqlens_report.h"
#include "common/layout.h"
#include "common/views.h"
#include "flamia/flamia.h"

namespace {

using namespace flamia::api;

constexpr const char* kWhere = "flamia_check_device_status";

flamia_status read_record(void* workspace, cudaStream_t stream, DeviceStatusRecord* record) {
  cudaError_t error =
      cudaMemcpyAsync(record, workspace, sizeof *record, cudaMemcpyDeviceToHost, stream);
  if (error != cudaSuccess) return fail_cuda(kWhere, "cudaMemcpyAsync", error);
  // Also reports the faults of earlier kernels on the stream.
  error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) return fail_cuda(kWhere, "cudaStreamSynchronize", error);
  return FLAMIA_OK;
}

flamia_status clear_record(void* workspace, cudaStream_t stream) {
  cudaError_t error = cudaMemsetAsync(workspace, 0, sizeof(DeviceStatusRecord), stream);
  if (error != cudaSuccess) return fail_cuda(kWhere, "cudaMemsetAsync", error);
  error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) return fail_cuda(kWhere, "cudaStreamSynchronize", error);
  return FLAMIA_OK;
}

// numerics §7: an Inf the quantize pass found in an input (the outputs are NaN).
bool is_infinite_input(int32_t code) {
  return code >= flamia::kDeviceStatusInfiniteQuery &&
         code <= flamia::kDeviceStatusInfiniteOutputGradient;
}

flamia_status fail_infinite_input(int32_t code) {
  static constexpr const char* kTensorNames[] = {"q", "k", "v", "d_o"};
  const bool key = code == flamia::kDeviceStatusInfiniteKey;
  return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
              "%s: %s holds an infinite value%s (E4M3 has no Inf: numerics §7); the call's "
              "outputs are NaN. Look for an overflow before attention",
              kWhere, kTensorNames[code - flamia::kDeviceStatusInfiniteQuery],
              key ? " (or keys so large that k minus its document's first key overflows)" : "");
}

}  // namespace

extern "C" flamia_status flamia_check_device_status(void* workspace, void* stream_handle) {
  if (workspace == nullptr) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: workspace is NULL", kWhere);
  }
  if (reinterpret_cast<uintptr_t>(workspace) % flamia::kWorkspaceAlignment != 0) {
    return fail(FLAMIA_ERROR_WORKSPACE, "%s: workspace (%p) must be %zu-byte aligned", kWhere,
                workspace, flamia::kWorkspaceAlignment);
  }
  flamia_status status = require_sm90_device(kWhere);
  if (status != FLAMIA_OK) return status;

  const auto stream = static_cast<cudaStream_t>(stream_handle);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t error = cudaStreamIsCapturing(stream, &capture);
  if (error != cudaSuccess) return fail_cuda(kWhere, "cudaStreamIsCapturing", error);
  if (capture != cudaStreamCaptureStatusNone) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: the stream is being captured into a CUDA graph; synchronizing would break "
                "the capture (check the status after launching the graph)",
                kWhere);
  }

  DeviceStatusRecord record;
  status = read_record(workspace, stream, &record);
  if (status != FLAMIA_OK || record.code == flamia::kDeviceStatusOk) return status;
  status = clear_record(workspace, stream);
  if (status != FLAMIA_OK) return status;
  if (record.code == flamia::kDeviceStatusSavedOperandsMismatch)
    return fail_saved_operands(kWhere, record);
  if (is_infinite_input(record.code)) return fail_infinite_input(record.code);
  return fail_seqlens(kWhere, record, "problem.cu_seqlens_q", "problem.cu_seqlens_k");
}
