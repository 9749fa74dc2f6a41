// Non-owning views of caller tensors and the option enums the kernels take.
#pragma once

#include <cstdint>

namespace flamia {

// A BF16 (tokens, heads, head_dim) tensor; strides in elements, head_dim contiguous.
struct Bf16View {
  const void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};
struct Bf16MutableView {
  void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// kStatic: Q (and the backward's dO and K̂c) per token as kExact; K and V one caller-supplied
// exponent per KV head (numerics §2).
enum class ScaleMode { kExact = 0, kBlock32 = 1, kStatic = 2 };
enum class KeySmoothing { kNone = 0, kFirstKey = 1, kVector = 2 };
enum class BackwardPrecision { kFp8 = 0, kFp8Bf16Grad = 1 };

// Device-side status word (first bytes of every workspace). Non-zero: cu_seqlens were found
// invalid on the device (or saved operands do not match the problem, or an input held an Inf);
// kernels then skip their work and outputs are poisoned with NaN.
enum DeviceStatus : int32_t {
  kDeviceStatusOk = 0,
  kDeviceStatusSeqlensNotStartingAtZero = 1,
  kDeviceStatusSeqlensDecreasing = 2,
  kDeviceStatusSeqlensTotalMismatch = 3,
  kDeviceStatusSeqlensAboveMax = 4,
  kDeviceStatusCausalLengthMismatch = 5,
  // The backward's saved operands were written for another problem (api/saved_operands.h).
  kDeviceStatusSavedOperandsMismatch = 6,
  // An input held an infinite value (numerics §7: E4M3 has no Inf, and saturating it to ±448
  // would be a finite wrong value). Found by the quantize pass from a token's amax and recorded
  // with an atomic maximum: of several, the largest code stays.
  kDeviceStatusInfiniteQuery = 7,
  kDeviceStatusInfiniteKey = 8,
  kDeviceStatusInfiniteValue = 9,
  kDeviceStatusInfiniteOutputGradient = 10,
};

}  // namespace flamia
