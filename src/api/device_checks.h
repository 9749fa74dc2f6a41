// Device-side guards that need no host synchronization (so calls stay graph-capturable):
// a cu_seqlens check run first, and a fill pass that writes outputs without the attention
// kernels: NaN over every output after the kernels when the check failed (the poison), or the
// defined results of a problem with no keys or no queries.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "api/device_status.h"
#include "api/saved_operands.h"
#include "api/seqlens_rules.h"

namespace flamia::api {

// The saved-operands header's part of the check (saved_operands.h): the forward writes
// `expected` to `write` (magic 0 when cu_seqlens are invalid); the backward compares the header
// at `compare_with` with `expected`. The kernel fills in the checksum words of `expected` from
// the cu_seqlens it reads (seqlens_checksum.h). Both null: no saved operands, no checksum.
struct SavedOperandsCheck {
  SavedOperandsHeader* write = nullptr;
  const SavedOperandsHeader* compare_with = nullptr;
  SavedOperandsHeader expected;
};

// Checks both arrays (seqlens_rules.h), then the saved-operands header, and rewrites the whole
// record: code 0 when valid, else the first violation (a header mismatch records the word's
// index, the saved value and the expected one in index, entry, next_entry). One small block;
// launch errors are returned.
cudaError_t launch_check_seqlens(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                 const SeqlensLimits& limits, const SavedOperandsCheck& saved,
                                 DeviceStatusRecord* record, cudaStream_t stream);

// A BF16 (tokens, heads, head_dim) output.
struct FillBf16 {
  void* data = nullptr;
  int64_t token_stride = 0;  // elements
  int64_t head_stride = 0;   // elements
  int32_t tokens = 0;
  int32_t heads = 0;
};
// A dense FP32 output (LSE, softmax stats) and the value it gets.
struct FillFloats {
  float* data = nullptr;
  int64_t count = 0;
  float value = 0.0f;
};

constexpr int kMaxFillBf16 = 3;    // O, or dQ, dK, dV
constexpr int kMaxFillFloats = 3;  // LSE, softmax stats and the K/V amax
constexpr uint16_t kBf16ZeroBits = 0x0000;
constexpr uint16_t kBf16NanBits = 0x7FC0;

struct FillTargets {
  FillBf16 bf16[kMaxFillBf16];
  int32_t num_bf16 = 0;
  int32_t head_dim = 0;    // of every BF16 target; a multiple of 8 (16-byte rows)
  uint16_t bf16_bits = 0;  // the value of every BF16 element
  FillFloats floats[kMaxFillFloats];
  int32_t num_floats = 0;

  void add(const FillBf16& target) { bf16[num_bf16++] = target; }
  void add(const FillFloats& target) {
    if (target.data != nullptr && target.count > 0) floats[num_floats++] = target;
  }
};

// Writes every target. With `only_if_status` non-null, only when *only_if_status != 0: the
// poison, launched after every call with NaN values; its blocks exit at once when the status is
// fine.
cudaError_t launch_fill_outputs(const int32_t* only_if_status, const FillTargets& targets,
                                cudaStream_t stream);

}  // namespace flamia::api
