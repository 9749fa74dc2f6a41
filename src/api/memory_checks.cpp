// Checks of caller memory (memory_checks.h).
#include "api/memory_checks.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

#include "api/errors.h"
#include "common/layout.h"

namespace flamia::api {
namespace {

constexpr int64_t kBf16Bytes = 2;
constexpr int64_t kStrideMultiple = int64_t(kTensorAlignment) / kBf16Bytes;  // 8 elements

flamia_status check_stride(int64_t stride, const char* tensor, const char* field,
                           const char* where) {
  if (stride <= 0) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s.%s (%lld) must be positive", where, tensor,
                field, static_cast<long long>(stride));
  }
  if (stride % kStrideMultiple != 0) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: %s.%s (%lld elements = %llu bytes) must be a multiple of %lld elements "
                "(%zu bytes)",
                where, tensor, field, static_cast<long long>(stride),
                static_cast<unsigned long long>(stride) * kBf16Bytes,  // < 2^64: stride > 0
                static_cast<long long>(kStrideMultiple), kTensorAlignment);
  }
  return FLAMIA_OK;
}

// Rows of head_dim contiguous elements are disjoint when, ordering the two dimensions by stride
// (ignoring a dimension of size 1), the inner stride covers a row and the outer stride covers
// all rows of the inner dimension.
bool rows_overlap(const flamia_tensor& t, int tokens, int heads, int head_dim) {
  struct Dim {
    int64_t stride;
    int64_t count;
  };
  Dim dims[2] = {{t.token_stride, tokens}, {t.head_stride, heads}};
  if (dims[0].stride > dims[1].stride) std::swap(dims[0], dims[1]);
  int64_t covered = head_dim;  // elements one step along the next dimension must clear
  for (const Dim& dim : dims) {
    if (dim.count <= 1) continue;
    if (dim.stride < covered) return true;
    // stride * count, saturated: past INT64_MAX no later stride can clear it
    covered = dim.stride > std::numeric_limits<int64_t>::max() / dim.count
                  ? std::numeric_limits<int64_t>::max()
                  : dim.stride * dim.count;
  }
  return false;
}

// Whether every element lies within the 64-bit address space: the offset past the last row,
// (tokens - 1) * token_stride + (heads - 1) * head_stride + head_dim elements, fits int64 bytes
// (the kernels' offsets) and added to data does not wrap. Strides are positive (checked first).
bool extent_fits(const flamia_tensor& t, int tokens, int heads, int head_dim) {
  constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / kBf16Bytes;
  int64_t extent = head_dim;
  for (const auto& [stride, count] :
       {std::pair{t.token_stride, tokens}, std::pair{t.head_stride, heads}}) {
    const int64_t steps = int64_t(count) - 1;
    if (steps > 0 && stride > (kMaxElements - extent) / steps) return false;
    extent += stride * std::max<int64_t>(steps, 0);
  }
  const uintptr_t bytes = uintptr_t(extent) * uintptr_t(kBf16Bytes);
  return reinterpret_cast<uintptr_t>(t.data) <= std::numeric_limits<uintptr_t>::max() - bytes;
}

flamia_status check_tensor(const flamia_tensor& t, const TensorCheck& c, int head_dim,
                           const char* where) {
  if (c.tokens == 0) return FLAMIA_OK;
  if (t.data == nullptr) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL", where, c.name);
  }
  if (!is_aligned(t.data, kTensorAlignment)) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s.data (%p) must be %zu-byte aligned", where,
                c.name, t.data, kTensorAlignment);
  }
  flamia_status status = check_stride(t.token_stride, c.name, "token_stride", where);
  if (status == FLAMIA_OK) status = check_stride(t.head_stride, c.name, "head_stride", where);
  if (status != FLAMIA_OK) return status;
  if (!extent_fits(t, c.tokens, c.heads, head_dim)) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: %s.token_stride (%lld) and %s.head_stride (%lld) over %d tokens x %d heads "
                "reach past the 64-bit address space from %s.data (%p); check the strides",
                where, c.name, static_cast<long long>(t.token_stride), c.name,
                static_cast<long long>(t.head_stride), c.tokens, c.heads, c.name, t.data);
  }
  if (c.output && rows_overlap(t, c.tokens, c.heads, head_dim)) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: %s rows overlap (token_stride %lld, head_stride %lld for %d tokens x %d "
                "heads of head_dim %d); an output must not alias itself",
                where, c.name, static_cast<long long>(t.token_stride),
                static_cast<long long>(t.head_stride), c.tokens, c.heads, head_dim);
  }
  return FLAMIA_OK;
}

}  // namespace

flamia_status check_tensors(
    std::initializer_list<std::pair<const flamia_tensor*, TensorCheck>> list, int head_dim,
    const char* where) {
  for (const auto& [tensor, check] : list) {
    const flamia_status status = check_tensor(*tensor, check, head_dim, where);
    if (status != FLAMIA_OK) return status;
  }
  return FLAMIA_OK;
}

// A dense FP32 array of `count` elements (LSE, softmax stats).
flamia_status check_floats(const float* data, int64_t count, bool required, const char* name,
                           const char* requirement, const char* where) {
  if (count == 0) return FLAMIA_OK;
  if (data == nullptr) {
    if (!required) return FLAMIA_OK;
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s is NULL (%s)", where, name, requirement);
  }
  if (!is_aligned(data, kTensorAlignment)) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s (%p) must be %zu-byte aligned", where, name,
                static_cast<const void*>(data), kTensorAlignment);
  }
  return FLAMIA_OK;
}

flamia_status check_workspace(const void* workspace, size_t bytes, size_t required,
                              const char* size_query, const char* where) {
  if (workspace == nullptr) {
    return fail(FLAMIA_ERROR_WORKSPACE,
                "%s: workspace is NULL; this problem needs %zu bytes (ask %s)", where, required,
                size_query);
  }
  if (!is_aligned(workspace, kWorkspaceAlignment)) {
    return fail(FLAMIA_ERROR_WORKSPACE, "%s: workspace (%p) must be %zu-byte aligned", where,
                workspace, kWorkspaceAlignment);
  }
  if (bytes < required) {
    return fail(FLAMIA_ERROR_WORKSPACE,
                "%s: workspace_bytes (%zu) is too small: this problem needs %zu bytes (ask %s)",
                where, bytes, required, size_query);
  }
  return FLAMIA_OK;
}

}  // namespace flamia::api
