// Thread-local last error message and status names (include/flamia/flamia.h).
#include "api/errors.h"

#include <cstdarg>
#include <cstdio>

namespace flamia::api {
namespace {

// Long enough for a message that names an argument and its values; longer ones are truncated.
constexpr size_t kMessageCapacity = 1024;
thread_local char last_message[kMessageCapacity] = "";

}  // namespace

flamia_status fail(flamia_status status, const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(last_message, kMessageCapacity, format, arguments);
  va_end(arguments);
  return status;
}

flamia_status fail_cuda(const char* where, const char* call, cudaError_t error) {
  return fail(FLAMIA_ERROR_CUDA, "%s: %s failed: %s (%s)", where, call, cudaGetErrorName(error),
              cudaGetErrorString(error));
}

}  // namespace flamia::api

extern "C" const char* flamia_last_error_message(void) {
  return flamia::api::last_message;
}

extern "C" const char* flamia_status_name(flamia_status status) {
  switch (status) {
    case FLAMIA_OK:
      return "FLAMIA_OK";
    case FLAMIA_ERROR_INVALID_ARGUMENT:
      return "FLAMIA_ERROR_INVALID_ARGUMENT";
    case FLAMIA_ERROR_UNSUPPORTED:
      return "FLAMIA_ERROR_UNSUPPORTED";
    case FLAMIA_ERROR_WORKSPACE:
      return "FLAMIA_ERROR_WORKSPACE";
    case FLAMIA_ERROR_CUDA:
      return "FLAMIA_ERROR_CUDA";
    case FLAMIA_ERROR_INVALID_SEQLENS:
      return "FLAMIA_ERROR_INVALID_SEQLENS";
    case FLAMIA_ERROR_NO_DEVICE:
      return "FLAMIA_ERROR_NO_DEVICE";
  }
  return "FLAMIA_UNKNOWN_STATUS";
}
