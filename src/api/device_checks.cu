// The device-side cu_seqlens check and the fill / poison pass (device_checks.h).
#include "api/device_checks.h"

#include <algorithm>

#include "api/seqlens_checksum.h"
#include "kernels/hopper/dependent_launch.cuh"

namespace flamia::api {
namespace {

// One block is plenty: the check reads 2 * (batch + 1) int32 values.
constexpr int kCheckThreads = 256;
constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xFFFFFFFFu;
static_assert(kCheckThreads % kWarpSize == 0, "the checksum sums whole warps");

// The first header word that differs from the expected one, as a record (code 0: none).
__device__ DeviceStatusRecord compare_saved_header(const SavedOperandsHeader& saved,
                                                   const SavedOperandsHeader& expected) {
  DeviceStatusRecord record;
  const auto* saved_words = reinterpret_cast<const int32_t*>(&saved);
  const auto* expected_words = reinterpret_cast<const int32_t*>(&expected);
  for (int i = 0; i < kSavedOperandsHeaderFields; ++i) {
    if (saved_words[i] == expected_words[i]) continue;
    record.code = kDeviceStatusSavedOperandsMismatch;
    record.index = i;
    record.entry = saved_words[i];
    record.next_entry = expected_words[i];
    break;
  }
  return record;
}

// This thread's share of seqlens_checksum: the terms of entries threadIdx.x, + blockDim.x, ...
// summed over the warp; lane 0 holds the warp's sum. Any split gives the same total (a sum
// mod 2^64; seqlens_checksum.h).
__device__ uint64_t warp_checksum_part(const int32_t* cu_q, const int32_t* cu_k, int32_t batch) {
  uint64_t sum = 0;
  for (int64_t i = threadIdx.x; i <= batch; i += blockDim.x)
    sum += seqlens_checksum_terms(cu_q, cu_k, i);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    sum += __shfl_down_sync(kFullWarp, sum, offset);
  return sum;
}

__global__ void check_seqlens_kernel(const int32_t* __restrict__ cu_q,
                                     const int32_t* __restrict__ cu_k, SeqlensLimits limits,
                                     SavedOperandsCheck saved, DeviceStatusRecord* record) {
  __shared__ ViolationKey block_first;
  __shared__ unsigned long long block_checksum;  // the type of the shared-memory atomicAdd
  if (threadIdx.x == 0) {
    block_first = kNoViolation;
    block_checksum = 0;
  }
  __syncthreads();

  // Only a saved-operands header holds the checksum: without one, no thread computes it.
  const bool with_saved = saved.write != nullptr || saved.compare_with != nullptr;
  if (with_saved) {
    const uint64_t part = warp_checksum_part(cu_q, cu_k, limits.batch);
    if (threadIdx.x % kWarpSize == 0) atomicAdd(&block_checksum, part);
  }

  ViolationKey first = kNoViolation;
  if (threadIdx.x == 0) {
    first = first_violation(check_seqlens_ends(cu_q, kSeqlensQ, limits.batch, limits.total_q),
                            check_seqlens_ends(cu_k, kSeqlensK, limits.batch, limits.total_k));
  }
  for (int32_t doc = threadIdx.x; doc < limits.batch; doc += blockDim.x) {
    first = first_violation(first, check_seqlens_document(cu_q, cu_k, doc, limits));
  }
  if (first != kNoViolation) atomicMin(&block_first, first);
  __syncthreads();

  if (threadIdx.x == 0) {
    DeviceStatusRecord result = describe_violation(block_first, cu_q, cu_k, limits);
    SavedOperandsHeader expected = saved.expected;
    set_cu_seqlens_checksum(expected, block_checksum);
    if (saved.write != nullptr) {
      if (result.code != kDeviceStatusOk) expected.magic = 0;
      *saved.write = expected;
    }
    if (saved.compare_with != nullptr && result.code == kDeviceStatusOk)
      result = compare_saved_header(*saved.compare_with, expected);
    *record = result;
  }
}

constexpr int kFillThreads = 256;
// The poison pass runs after every call; when the status is fine its blocks exit at once, so a
// small grid keeps that cost low. Grid-stride loops cover any output size.
constexpr int kFillMaxBlocks = 256;
constexpr int kBf16PerChunk = 8;  // one 16-byte store
constexpr int kBf16Bits = 16;

// Launched early (hopper/dependent_launch.cuh): it waits for the kernels before it first.
__global__ void fill_outputs_kernel(const int32_t* only_if_status, FillTargets targets) {
  hopper::wait_for_prior_grids();
  if (only_if_status != nullptr && *only_if_status == kDeviceStatusOk) return;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks_per_row = targets.head_dim / kBf16PerChunk;
  const uint32_t pair = (uint32_t(targets.bf16_bits) << kBf16Bits) | targets.bf16_bits;
  const uint4 chunk_value = make_uint4(pair, pair, pair, pair);

  for (int t = 0; t < targets.num_bf16; ++t) {
    const FillBf16& target = targets.bf16[t];
    const int64_t chunks_per_token = chunks_per_row * target.heads;
    const int64_t chunks = chunks_per_token * target.tokens;
    auto* base = static_cast<uint16_t*>(target.data);
    for (int64_t i = start; i < chunks; i += stride) {
      const int64_t token = i / chunks_per_token;
      const int64_t head = (i % chunks_per_token) / chunks_per_row;
      const int64_t chunk = i % chunks_per_row;
      uint16_t* row = base + token * target.token_stride + head * target.head_stride;
      reinterpret_cast<uint4*>(row)[chunk] = chunk_value;
    }
  }
  for (int f = 0; f < targets.num_floats; ++f) {
    const FillFloats& target = targets.floats[f];
    for (int64_t i = start; i < target.count; i += stride) target.data[i] = target.value;
  }
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

cudaError_t launch_check_seqlens(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                 const SeqlensLimits& limits, const SavedOperandsCheck& saved,
                                 DeviceStatusRecord* record, cudaStream_t stream) {
  check_seqlens_kernel<<<1, kCheckThreads, 0, stream>>>(cu_seqlens_q, cu_seqlens_k, limits, saved,
                                                        record);
  return cudaGetLastError();
}

cudaError_t launch_fill_outputs(const int32_t* only_if_status, const FillTargets& targets,
                                cudaStream_t stream) {
  int64_t work = 0;
  for (int t = 0; t < targets.num_bf16; ++t) {
    const FillBf16& target = targets.bf16[t];
    work =
        std::max(work, int64_t(target.tokens) * target.heads * (targets.head_dim / kBf16PerChunk));
  }
  for (int f = 0; f < targets.num_floats; ++f) work = std::max(work, targets.floats[f].count);
  const int blocks = int(std::clamp<int64_t>(ceil_div(work, kFillThreads), 1, kFillMaxBlocks));
  return hopper::launch_kernel(fill_outputs_kernel, dim3(blocks), dim3(kFillThreads), 0, stream,
                               hopper::Launch::kEarly, only_if_status, targets);
}

}  // namespace flamia::api
