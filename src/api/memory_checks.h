// Checks of caller memory: BF16 tensors (data, alignment, strides, self-overlap of outputs),
// dense FP32 arrays and the workspace. Part of argument validation (validation.h); nothing here
// dereferences a pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "flamia/flamia.h"

namespace flamia::api {

// Tensor data, LSE, stats and the smoothing vector: 16 bytes, the width of vector and TMA
// accesses.
constexpr size_t kTensorAlignment = 16;

inline bool is_aligned(const void* pointer, size_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

// A BF16 (tokens, heads, head_dim) tensor. Empty tensors are never accessed: their data may be
// NULL and their strides are not checked. Every element must lie within the 64-bit address
// space (the kernels' int64 offsets would wrap). Outputs must not overlap themselves (two rows
// written to the same bytes would race); inputs may.
struct TensorCheck {
  const char* name;
  int tokens;
  int heads;
  bool output;
};

// The first failing tensor of the list, in order.
flamia_status check_tensors(
    std::initializer_list<std::pair<const flamia_tensor*, TensorCheck>> tensors, int head_dim,
    const char* where);

// A dense FP32 array of `count` elements (LSE, softmax stats); NULL is an error when required.
flamia_status check_floats(const float* data, int64_t count, bool required, const char* name,
                           const char* requirement, const char* where);

// NULL, misaligned or smaller than `required` -> FLAMIA_ERROR_WORKSPACE; `size_query` names the
// function that gives the size.
flamia_status check_workspace(const void* workspace, size_t bytes, size_t required,
                              const char* size_query, const char* where);

}  // namespace flamia::api
