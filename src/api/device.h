// The device requirement of the GPU entry points, checked only after every argument is valid so
// that argument validation can be tested on machines without a GPU.
#pragma once

#include "flamia/flamia.h"

namespace flamia::api {

// FLAMIA_OK when the current CUDA device is an sm_90 GPU (the sm_90a code runs nowhere else),
// FLAMIA_ERROR_NO_DEVICE with a message otherwise. Makes no stream calls: capture-safe.
flamia_status require_sm90_device(const char* where);

}  // namespace flamia::api
