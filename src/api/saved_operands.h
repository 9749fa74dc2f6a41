// The optional saved-operands buffer (flamia.h: flamia_forward_args::saved_operands): the
// forward's quantize pass writes Q, K and V there in every layout the FP8 backward reads, so
// the backward reads no BF16 q, k, v and runs only the dO job of its quantize pass.
//
//   SavedOperandsHeader (what the forward wrote it for; checked on the device by the backward)
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
#include "common/layout.h"
#include "flamia/flamia.h"

namespace flamia::api {

// What a saved-operands buffer was written for. The forward's cu_seqlens check kernel writes
// it (magic only when cu_seqlens are valid); the backward's compares it field by field.
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
};
constexpr uint32_t kSavedOperandsMagic = 0x464C5301u;  // "FLS" + layout version 1
constexpr int kSavedOperandsHeaderFields = sizeof(SavedOperandsHeader) / sizeof(int32_t);
static_assert(sizeof(SavedOperandsHeader) == kSavedOperandsHeaderFields * sizeof(int32_t),
              "the header is compared as an array of 32-bit words");

// The header a problem's forward writes and its backward expects.
SavedOperandsHeader saved_operands_header(const flamia_problem& problem);

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
