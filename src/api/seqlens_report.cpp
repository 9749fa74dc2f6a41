// Messages for cu_seqlens violations (seqlens_report.h).
#include "api/seqlens_report.h"

#include "api/errors.h"
#include "api/seqlens_rules.h"

namespace flamia::api {

flamia_status fail_seqlens(const char* where, const DeviceStatusRecord& v, const char* q_name,
                           const char* k_name) {
  const bool is_q = v.array == kSeqlensQ;
  const char* name = is_q ? q_name : k_name;
  // 64-bit: entries far apart would overflow a 32-bit difference.
  const long long length = static_cast<long long>(v.next_entry) - v.entry;

  switch (v.code) {
    case kDeviceStatusSeqlensNotStartingAtZero:
      return fail(FLAMIA_ERROR_INVALID_SEQLENS, "%s: %s[0] is %d; it must be 0", where, name,
                  v.entry);
    case kDeviceStatusSeqlensDecreasing:
      return fail(FLAMIA_ERROR_INVALID_SEQLENS,
                  "%s: %s decreases at document %d: %s[%d] = %d < %s[%d] = %d (entries must be "
                  "non-decreasing)",
                  where, name, v.index, name, v.index + 1, v.next_entry, name, v.index, v.entry);
    case kDeviceStatusSeqlensTotalMismatch:
      return fail(FLAMIA_ERROR_INVALID_SEQLENS,
                  "%s: the last entry %s[%d] = %d must equal %s (%d), the number of packed tokens",
                  where, name, v.index, v.entry, is_q ? "problem.total_q" : "problem.total_k",
                  v.limit);
    case kDeviceStatusSeqlensAboveMax:
      return fail(FLAMIA_ERROR_INVALID_SEQLENS,
                  "%s: document %d of %s has length %lld, above %s (%d)", where, v.index, name,
                  length, is_q ? "problem.max_seqlen_q" : "problem.max_seqlen_k", v.limit);
    case kDeviceStatusCausalLengthMismatch:
      return fail(FLAMIA_ERROR_INVALID_SEQLENS,
                  "%s: causal document %d has %lld queries (%s) but %lld keys (%s); causal "
                  "attention with different query and key lengths is not supported",
                  where, v.index, length, q_name,
                  static_cast<long long>(v.k_next_entry) - v.k_entry, k_name);
    default:
      return fail(FLAMIA_ERROR_INVALID_SEQLENS, "%s: unknown cu_seqlens status code %d", where,
                  v.code);
  }
}

}  // namespace flamia::api
