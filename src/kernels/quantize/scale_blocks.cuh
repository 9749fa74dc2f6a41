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
