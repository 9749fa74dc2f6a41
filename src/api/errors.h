// Error reporting of the C API: every failing entry point records a message naming the
// offending argument in a thread-local buffer (flamia_last_error_message) and returns a status.
#pragma once

#include <cuda_runtime.h>

#include "flamia/flamia.h"

namespace flamia::api {

// Records the printf-style message for this thread and returns `status`, so that validation
// reads `return fail(FLAMIA_ERROR_..., "...", ...);`. Never allocates, never throws.
flamia_status fail(flamia_status status, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

// FLAMIA_ERROR_CUDA with the failing call and CUDA's own error name and description.
flamia_status fail_cuda(const char* where, const char* call, cudaError_t error);

}  // namespace flamia::api
