// Host-side creation of TMA tensor maps (cuTensorMapEncodeTiled through the runtime's driver
// entry point, so nothing links libcuda directly).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flamia::hopper {

enum class TmaSwizzle { kNone, k32B, k64B, k128B };
enum class TmaElement { kByte, kFloat32 };  // FP8 values; the backward's FP32 query factors

// A tensor of up to 3 dimensions; dims[0] is contiguous; strides in bytes for dims 1..
// (multiples of 16); dims and box sizes in elements.
struct TensorMapSpec {
  const void* base = nullptr;
  TmaElement element = TmaElement::kByte;
  int rank = 2;
  uint64_t dims[3] = {0, 0, 0};
  uint64_t strides_bytes[2] = {0, 0};
  uint32_t box[3] = {1, 1, 1};
  TmaSwizzle swizzle = TmaSwizzle::k128B;
};

// Returns cudaSuccess or an error; `what` names the failure for messages.
cudaError_t make_tensor_map(const TensorMapSpec& spec, CUtensorMap* map, const char** what);

TmaSwizzle swizzle_for_row_bytes(int row_bytes);

}  // namespace flamia::hopper
