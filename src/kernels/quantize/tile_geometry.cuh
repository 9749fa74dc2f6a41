// Which tokens and channels each thread of a quantize CTA handles, and the shared-memory layout
// of the token-major staging tile. Chosen so that
//  - every global load is a full 32-byte sector (16 channels of one token row),
//  - a thread's 4 tokens are the 4 tokens one permuted 32-bit word holds (slots 4k..4k+3 of a
//    group of 16 hold tokens 2k, 2k+1, 2k+8, 2k+9), so the transpose is register byte permutes
//    plus one 4-byte shared store per channel,
//  - one warp holds all channels of its tokens (amax and dot products reduce with shuffles),
//  - the staging stores and the 16-byte reads that write the token-major copy out are free of
//    bank conflicts (XOR swizzle of the word index by the channel chunk).
//
// Lane = quad k (0..3) + 4 s; s splits into the chunk within the warp and, at head dim 64, which
// of the warp's two groups of 16 tokens. At head dim 256 a thread handles two chunks (slices)
// 8 apart, so that every head dim runs 128 or 256 threads.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

constexpr int kWarpSize = 32;
constexpr int kLanesPerQuadRow = 4;  // lanes k = 0..3 hold the 4 quads of one group
constexpr int kMaxWarpChunks = 8;    // 8 lanes x 4 quads = one warp
constexpr int kGroupsPerTile = kTileTokens / kPermutationGroup;  // 8
constexpr int kBytesPerWord = 4;
constexpr int kWordsPerGroup = kPermutationGroup / kBytesPerWord;  // 4 words = 16 slots

// CTAs of `threads` threads at `registers` registers each that fit one SM's register file (the
// register kernels' __launch_bounds__).
constexpr int ctas_per_sm_at(int registers, int threads) {
  constexpr int kRegistersPerSm = 65536;
  return kRegistersPerSm / registers / threads;
}

template <int kHeadDim>
struct TileGeometry {
  static_assert(kHeadDim % (kChunkChannels * kLanesPerQuadRow) == 0, "head dim");
  static constexpr int kChunks = kHeadDim / kChunkChannels;  // 4, 8, 16
  static constexpr int kWarpChunks = kChunks < kMaxWarpChunks ? kChunks : kMaxWarpChunks;
  static constexpr int kSlices = kChunks / kWarpChunks;             // chunks per thread: 1, 1, 2
  static constexpr int kWarpGroups = kMaxWarpChunks / kWarpChunks;  // token groups per warp
  static constexpr int kThreads = kTileTokens / kQuadTokens * kWarpChunks;  // 128, 256, 256
  static constexpr int kTokensPerHaloPass = kThreads / kChunks;             // 32, 32, 16
  static constexpr int kStageBytes = kHeadDim * kTileTokens;
  static constexpr int kWriteoutPerThread = kHeadDim * kGroupsPerTile / kThreads;  // 4, 4, 8
  static_assert(kThreads / kWarpSize * kWarpGroups == kGroupsPerTile, "warps cover the tile");
  static_assert(kHeadDim * kGroupsPerTile % kThreads == 0, "writeout mapping");
  static_assert(kTileTokens / kBytesPerWord == kWarpSize, "a staging row spans the 32 banks");

  int quad;       // k: which quad of its group (0..3)
  int sub_chunk;  // chunk within the warp's kWarpChunks
  int group;      // group of 16 tokens in the tile

  __host__ __device__ __forceinline__ explicit TileGeometry(int tid) {
    const int lane = tid % kWarpSize;
    const int warp = tid / kWarpSize;
    quad = lane % kLanesPerQuadRow;
    const int s = lane / kLanesPerQuadRow;
    sub_chunk = s % kWarpChunks;
    group = warp * kWarpGroups + s / kWarpChunks;
  }
  __host__ __device__ __forceinline__ int chunk(int slice) const {
    return slice * kWarpChunks + sub_chunk;
  }

  // Reduces over the lanes holding the other chunks of the same tokens (lane bits 2..).
  template <typename Op>
  __device__ __forceinline__ static float reduce_chunks(float v, Op op) {
#pragma unroll
    for (int mask = kLanesPerQuadRow; mask < kLanesPerQuadRow * kWarpChunks; mask *= 2)
      v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, mask));
    return v;
  }

  // Reduces over the kChunks consecutive lanes that hold one halo token (HaloWindow).
  template <typename Op>
  __device__ __forceinline__ static float reduce_halo_lanes(float v, Op op) {
#pragma unroll
    for (int mask = 1; mask < kChunks; mask *= 2) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, mask));
    return v;
  }

  // Word swizzle of staging row d: XOR with the row's chunk within the warp, scaled so that
  // the chunks of one warp land on distinct 4-word bank groups.
  __host__ __device__ __forceinline__ static int stage_swizzle(int d) {
    return (d / kChunkChannels) % kWarpChunks * kWordsPerGroup * kWarpGroups;
  }
  __host__ __device__ __forceinline__ static int stage_byte(int d, int slot) {
    const int word = (slot / kBytesPerWord) ^ stage_swizzle(d);
    return d * kTileTokens + word * kBytesPerWord + slot % kBytesPerWord;
  }
};

// The halo of a tile [tile_begin, tile_end): the tokens [window_begin, tile_begin) and
// [tile_end, window_end) of the scale blocks that straddle its ends, read for their amax only,
// kChunks consecutive lanes per token (one chunk each), kTokensPerHaloPass tokens per pass.
struct HaloSlot {
  int t;      // the token
  int chunk;  // the thread's chunk of it
  bool ok;    // whether this pass has a token for the thread
  bool left;  // before the tile (in the document of its first token), else after its end
};
struct HaloWindow {
  int window_begin, tile_begin, tile_end, window_end;
  __device__ __forceinline__ int count() const {
    return (tile_begin - window_begin) + (window_end - tile_end);
  }
  template <int kHeadDim>
  __device__ __forceinline__ HaloSlot slot(int base, int tid) const {
    using Geometry = TileGeometry<kHeadDim>;
    const int i = base + tid / Geometry::kChunks;
    const int left_count = tile_begin - window_begin;
    const bool left = i < left_count;
    return {left ? window_begin + i : tile_end + (i - left_count), tid % Geometry::kChunks,
            i < count(), left};
  }
};

}  // namespace flamia::quantize
