// The device status record at the start of every workspace. Its first word is the DeviceStatus
// (src/common/views.h) the kernels read; the rest describes the violation for the message of
// flamia_check_device_status. Each flamia_forward / flamia_backward call rewrites the whole
// record first (a fresh workspace's garbage never counts), so it describes the latest call that
// used the workspace.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flamia::api {

// A cu_seqlens violation: where it is and the values involved. The host check fills one the
// same way (seqlens_rules.h), so host and device messages read alike.
struct DeviceStatusRecord {
  int32_t code = 0;        // DeviceStatus; 0 = valid
  int32_t array = 0;       // SeqlensArray holding the violation (q for the causal rule)
  int32_t index = 0;       // the entry (start: 0, end: batch) or the document
  int32_t entry = 0;       // array[index]
  int32_t next_entry = 0;  // array[index + 1] (document rules)
  int32_t k_entry = 0;     // cu_seqlens_k[index] and [index + 1] (causal rule)
  int32_t k_next_entry = 0;
  int32_t limit = 0;  // the total (end rule) or max_seqlen (length rule) of that array
};
static_assert(offsetof(DeviceStatusRecord, code) == 0, "the kernels read the first word");

}  // namespace flamia::api
