// The optional saved-operands buffer (flamia.h: flamia_forward_args::saved_operands): the
// forward's quantize pass writes Q, K and V there in every layout the FP8 backward reads, so
// the backward reads no BF16 q, k, v and runs only the dO job of its quantize pass.
//
//   SavedOperandsHeader (what the forward wrote it for, with a checksum of its cu_seqlens;
//                        checked on the device by the backward)
//   ForwardOperands: Q̂, K̂ (from k - m), V̂ᵀ (values, exponents); no lse_shift (the workspace's)
//   Q̂ᵀ (values; Q̂'s exponents), K̂cᵀ (values, exponents), V̂ (values; V̂ᵀ's exponents)
//
// The same bytes the backward's own quantize pass would write (docs/numerics.md §3): the
// gradients are bitwise those of a backward without the buffer. Every buffer starts at a
// multiple of kWorkspaceAlignment (256) from the base.
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/device_status.h"
#include "api/seqlens_rules.h"
#include "common/layout.h"
#include "flamia/flamia.h"

namespace flamia::api {

// What a saved-operands buffer was written for. The forward's cu_seqlens check kernel writes
// it (magic only when cu_seqlens are valid); the backward's compares it field by field, in
// order, so a size mismatch is named before the checksum it also changes.
struct SavedOperandsHeader {
  uint32_t magic = 0;
  int32_t batch = 0;
  int32_t total_q = 0;
  int32_t total_k = 0;
  int32_t heads_q = 0;
  int32_t heads_kv = 0;
  int32_t head_dim = 0;
  int32_t scale_mode = 0;
  int32_t key_smoothing = 0;
  // seqlens_checksum (seqlens_checksum.h) of cu_seqlens_q and cu_seqlens_k, as two 32-bit
  // words (a uint64_t member would add padding to the word-by-word comparison). Computed on the
  // device by each pass's check kernel; the host leaves them 0 in saved_operands_header.
  uint32_t cu_seqlens_checksum_low = 0;
  uint32_t cu_seqlens_checksum_high = 0;
};
// "FLS" + layout version 2 (version 1 had no cu_seqlens checksum).
constexpr uint32_t kSavedOperandsMagic = 0x464C5302u;
constexpr int kSavedOperandsHeaderFields = sizeof(SavedOperandsHeader) / sizeof(int32_t);
static_assert(sizeof(SavedOperandsHeader) == kSavedOperandsHeaderFields * sizeof(int32_t),
              "the header is compared as an array of 32-bit words");
static_assert(sizeof(SavedOperandsHeader) <= kWorkspaceAlignment,
              "the header fits its 256-byte slot at the start of the buffer");
// The word indices of the checksum (for the mismatch message).
constexpr int kSavedOperandsChecksumLowField =
    offsetof(SavedOperandsHeader, cu_seqlens_checksum_low) / sizeof(int32_t);
constexpr int kSavedOperandsChecksumHighField =
    offsetof(SavedOperandsHeader, cu_seqlens_checksum_high) / sizeof(int32_t);
constexpr int kChecksumHighShift = 32;

// The header a problem's forward writes and its backward expects, but for the checksum words
// (set_cu_seqlens_checksum: only the device reads cu_seqlens).
SavedOperandsHeader saved_operands_header(const flamia_problem& problem);

FLAMIA_SEQLENS_HD void set_cu_seqlens_checksum(SavedOperandsHeader& header, uint64_t checksum) {
  header.cu_seqlens_checksum_low = uint32_t(checksum);
  header.cu_seqlens_checksum_high = uint32_t(checksum >> kChecksumHighShift);
}

struct SavedOperandsLayout {
  SavedOperandsHeader* header = nullptr;
  ForwardOperands fwd;  // lse_shift stays null
  Fp8Copy q_t;
  Fp8Copy k_centered_t;
  Fp8Copy v;
  size_t bytes = 0;  // a multiple of kWorkspaceAlignment
};

// With base == nullptr only measures (all pointers null).
SavedOperandsLayout layout_saved_operands(const PackedShape& shape, const void* base);

// The message of a kDeviceStatusSavedOperandsMismatch record (device_checks.h): which field of
// the header differs, and how. Returns FLAMIA_ERROR_INVALID_ARGUMENT.
flamia_status fail_saved_operands(const char* where, const DeviceStatusRecord& mismatch);

}  // namespace flamia::api
