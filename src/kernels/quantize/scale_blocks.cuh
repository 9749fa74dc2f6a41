// Scale blocks (docs/numerics.md §2): the token range whose amax sets a token's exponent.
#pragma once

#include "common/fp8_numerics.h"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

struct TokenRange {
  int begin;
  int end;
};

// The block of `kind` that holds token t of the document [doc_begin, doc_end).
__host__ __device__ __forceinline__ TokenRange scale_block(BlockKind kind, int t, int doc_begin,
                                                           int doc_end) {
  switch (kind) {
    case BlockKind::kBlock32: {
      const int begin = doc_begin + (t - doc_begin) / kBlock32Tokens * kBlock32Tokens;
      return {begin, begin + kBlock32Tokens < doc_end ? begin + kBlock32Tokens : doc_end};
    }
    case BlockKind::kTile64: {
      // Tile-aligned: blocks start at floor16(doc_begin) + 64 n, clipped to the document.
      const int origin = doc_begin / kPermutationGroup * kPermutationGroup;
      const int begin = origin + (t - origin) / kTileAlignedQueryBlock * kTileAlignedQueryBlock;
      const int end = begin + kTileAlignedQueryBlock;
      return {begin > doc_begin ? begin : doc_begin, end < doc_end ? end : doc_end};
    }
    case BlockKind::kToken:
    default:
      return {t, t + 1};
  }
}

// Amax values are kept as FP32 bit patterns of non-negative values (NaN excluded), so unsigned
// order is float order.
__device__ __forceinline__ uint32_t amax_bits(float amax) {
  // A NaN amax (0/0 in the dO/l copy) is ignored like the reference's std::max ignores it.
  return amax == amax ? __float_as_uint(amax) : 0u;
}

// numerics §7: a token (or block) whose amax is infinite held an Inf, which E4M3 cannot hold
// (satfinite would make it ±448, a finite wrong value). `bits`: an amax_bits value (NaN
// excluded, so only +Inf matches).
constexpr uint32_t kInfiniteAmaxBits = 0x7F800000u;
__host__ __device__ constexpr bool is_infinite_amax(uint32_t bits) {
  return bits == kInfiniteAmaxBits;
}

// Records an Inf input: the attention kernels then skip their work and the call's outputs are
// poisoned with NaN (flamia_check_device_status names the tensor). An atomic maximum without a
// result (a fire-and-forget reduction): while the quantize pass runs the status is 0 or another
// Inf code (the device check before it stops every kernel of the call), so one Inf code stays.
__device__ __forceinline__ void record_infinite_input(int32_t* device_status,
                                                      DeviceStatus infinite_status) {
  if (device_status != nullptr) atomicMax(device_status, int32_t(infinite_status));
}
__device__ __forceinline__ void record_infinite_input(const TensorJob& job) {
  record_infinite_input(job.device_status, job.infinite_status);
}
__device__ __forceinline__ void report_infinite_amax(const TensorJob& job, uint32_t bits) {
  if (is_infinite_amax(bits)) record_infinite_input(job);
}

// Takes the maximum of the warp's amax bit patterns (`own`: the calling lane's) into *out (FP32,
// non-negative) with one atomic. Called by whole warps.
__device__ __forceinline__ void add_warp_amax(uint32_t own, float* out) {
  constexpr unsigned kAllLanes = 0xFFFFFFFFu;
  constexpr int kWarpLanes = 32;
  const uint32_t warp_max = __reduce_max_sync(kAllLanes, own);
  if (threadIdx.x % kWarpLanes == 0 && warp_max != 0u)
    atomicMax(reinterpret_cast<unsigned int*>(out), warp_max);
}

// Takes the maximum of `count` amax bit patterns (one per token, `bits[i]` for the calling thread's
// i = tid) into *out (FP32, non-negative) with one atomic per warp. Called by whole warps.
__device__ __forceinline__ void add_tile_amax(const uint32_t* bits, int count, int tid,
                                              float* out) {
  add_warp_amax(tid < count ? bits[tid] : 0u, out);
}

}  // namespace flamia::quantize
