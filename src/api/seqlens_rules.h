// The cu_seqlens rules, written once and run in two places: on the host over the caller's
// optional host copies (validation.cpp) and on the device over the arrays the kernels read
// (device_checks.cu). Both report the same violation for the same contents: the one with the
// smallest (code, array, index) key, so the most basic problem is named first.
#pragma once

#include <cstdint>

#include "api/device_status.h"
#include "common/views.h"

#if defined(__CUDACC__)
#define FLAMIA_SEQLENS_HD __host__ __device__ __forceinline__
#else
#define FLAMIA_SEQLENS_HD inline
#endif

namespace flamia::api {

enum SeqlensArray : int32_t { kSeqlensQ = 0, kSeqlensK = 1 };

// What the contents must agree with (the problem's scalars).
struct SeqlensLimits {
  int32_t batch = 0;
  int32_t total_q = 0;
  int32_t total_k = 0;
  int32_t max_seqlen_q = 0;
  int32_t max_seqlen_k = 0;
  bool causal = false;
};

// A violation as one orderable number: DeviceStatus code, then array, then index (document, or
// `batch` for the final entry). Fits the 64-bit shared-memory atomicMin of the device check.
using ViolationKey = unsigned long long;
constexpr ViolationKey kNoViolation = ~0ull;
constexpr int kViolationCodeShift = 40;
constexpr int kViolationArrayShift = 32;
constexpr ViolationKey kViolationArrayMask = 0xFF;
constexpr ViolationKey kViolationIndexMask = 0xFFFFFFFFull;

FLAMIA_SEQLENS_HD ViolationKey violation_key(int32_t code, int32_t array, int32_t index) {
  return (ViolationKey(code) << kViolationCodeShift) |
         (ViolationKey(array) << kViolationArrayShift) | (ViolationKey(uint32_t(index)));
}
FLAMIA_SEQLENS_HD int32_t violation_code(ViolationKey key) {
  return key == kNoViolation ? int32_t(kDeviceStatusOk) : int32_t(key >> kViolationCodeShift);
}
FLAMIA_SEQLENS_HD int32_t violation_array(ViolationKey key) {
  return int32_t((key >> kViolationArrayShift) & kViolationArrayMask);
}
FLAMIA_SEQLENS_HD int32_t violation_index(ViolationKey key) {
  return int32_t(key & kViolationIndexMask);
}
FLAMIA_SEQLENS_HD ViolationKey first_violation(ViolationKey a, ViolationKey b) {
  return a < b ? a : b;
}

// The two ends of one array: cu[0] == 0 and cu[batch] == total.
FLAMIA_SEQLENS_HD ViolationKey check_seqlens_ends(const int32_t* cu, int32_t array, int32_t batch,
                                                  int32_t total) {
  if (cu[0] != 0) return violation_key(kDeviceStatusSeqlensNotStartingAtZero, array, 0);
  if (cu[batch] != total) return violation_key(kDeviceStatusSeqlensTotalMismatch, array, batch);
  return kNoViolation;
}

// The rules of document `doc` (0 <= doc < batch). Either array may be null (the host check of a
// single host copy); the causal rule needs both.
FLAMIA_SEQLENS_HD ViolationKey check_seqlens_document(const int32_t* cu_q, const int32_t* cu_k,
                                                      int32_t doc, const SeqlensLimits& limits) {
  ViolationKey first = kNoViolation;
  // 64-bit differences: int32 entries far apart would overflow a 32-bit subtraction.
  int64_t len_q = 0;
  int64_t len_k = 0;
  if (cu_q != nullptr) {
    len_q = int64_t(cu_q[doc + 1]) - int64_t(cu_q[doc]);
    if (len_q < 0) {
      first = first_violation(first, violation_key(kDeviceStatusSeqlensDecreasing, kSeqlensQ, doc));
    } else if (len_q > limits.max_seqlen_q) {
      first = first_violation(first, violation_key(kDeviceStatusSeqlensAboveMax, kSeqlensQ, doc));
    }
  }
  if (cu_k != nullptr) {
    len_k = int64_t(cu_k[doc + 1]) - int64_t(cu_k[doc]);
    if (len_k < 0) {
      first = first_violation(first, violation_key(kDeviceStatusSeqlensDecreasing, kSeqlensK, doc));
    } else if (len_k > limits.max_seqlen_k) {
      first = first_violation(first, violation_key(kDeviceStatusSeqlensAboveMax, kSeqlensK, doc));
    }
  }
  if (limits.causal && cu_q != nullptr && cu_k != nullptr && len_q != len_k) {
    first =
        first_violation(first, violation_key(kDeviceStatusCausalLengthMismatch, kSeqlensQ, doc));
  }
  return first;
}

// The record of a violation (kNoViolation gives code 0): the entries it involves and the limit
// it broke, read again from the arrays.
FLAMIA_SEQLENS_HD DeviceStatusRecord describe_violation(ViolationKey violation, const int32_t* cu_q,
                                                        const int32_t* cu_k,
                                                        const SeqlensLimits& limits) {
  DeviceStatusRecord record;
  if (violation == kNoViolation) return record;
  record.code = violation_code(violation);
  record.array = violation_array(violation);
  record.index = violation_index(violation);
  const bool is_q = record.array == kSeqlensQ;
  const int32_t* cu = is_q ? cu_q : cu_k;
  record.entry = cu[record.index];
  switch (record.code) {
    case kDeviceStatusSeqlensTotalMismatch:
      record.limit = is_q ? limits.total_q : limits.total_k;
      break;
    case kDeviceStatusSeqlensAboveMax:
      record.limit = is_q ? limits.max_seqlen_q : limits.max_seqlen_k;
      record.next_entry = cu[record.index + 1];
      break;
    case kDeviceStatusSeqlensDecreasing:
      record.next_entry = cu[record.index + 1];
      break;
    case kDeviceStatusCausalLengthMismatch:
      record.next_entry = cu[record.index + 1];
      record.k_entry = cu_k[record.index];
      record.k_next_entry = cu_k[record.index + 1];
      break;
    default:
      break;
  }
  return record;
}

}  // namespace flamia::api
