// Messages for cu_seqlens violations found on the host or the device (seqlens_rules.h).
#pragma once

#include "api/device_status.h"
#include "flamia/flamia.h"

namespace flamia::api {

// Records a message naming the array, the entry, the values and the rule, and returns
// FLAMIA_ERROR_INVALID_SEQLENS. `q_name` / `k_name` name the arrays as the caller knows them
// ("problem.host_cu_seqlens_q" on the host, "problem.cu_seqlens_q" on the device).
flamia_status fail_seqlens(const char* where, const DeviceStatusRecord& violation,
                           const char* q_name, const char* k_name);

}  // namespace flamia::api
