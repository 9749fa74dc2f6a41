// Which tokens and channels each thread of a quantize CTA handles, and the shared-memory layout
// of the token-major staging tile. Chosen so that
//  - every global load is a full 32-byte sector (16 channels of one token row),
//  - a thread's 4 tokens are the 4 tokens one permuted 32-bit word holds (slots 4k..4k+3 of a
//    group of 16 hold tokens 2k, 2k+1, 2k+8, 2k+9), so the transpose is register byte permutes
//    plus one 4-byte shared store per channel,
//  - those stores and the 16-byte reads that write the token-major copy out are free of bank
//    conflicts (XOR swizzle of the word index by the channel chunk).
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

constexpr int kWarpSize = 32;
constexpr int kLanesPerQuadRow = 4;         // lanes k = 0..3 hold the 4 quads of one group
constexpr int kGroupsPerTile = kTileTokens / kPermutationGroup;  // 8
constexpr int kBytesPerWord = 4;
constexpr int kWordsPerGroup = kPermutationGroup / kBytesPerWord;  // 4 words = 16 slots
constexpr int kTokenMajorChunkBytes = 16;   // one 16-byte store = one group of 16 slots

template <int kHeadDim>
struct TileGeometry {
  static_assert(kHeadDim % (kChunkChannels * kLanesPerQuadRow) == 0, "head dim");
  static constexpr int kChunks = kHeadDim / kChunkChannels;               // 4, 8, 16
  static constexpr int kWarpChunks = kChunks < 8 ? kChunks : 8;           // chunks in one warp
  static constexpr int kWarpGroups = 8 / kWarpChunks;                     // token groups / warp
  static constexpr int kParts = kChunks / kWarpChunks;                    // warps per token
  static constexpr int kThreads = kTileTokens / kQuadTokens * kChunks;    // 128, 256, 512
  // Register budget: 64 per thread (the input tile lives in shared memory, so this fits
  // without spills), which lets shared memory, not registers, bound the CTAs per SM.
  static constexpr int kRegisterBudget = 64;
  static constexpr int kRegistersPerSm = 65536;
  static constexpr int kMinBlocksPerSm = kRegistersPerSm / kRegisterBudget / kThreads;
  static constexpr int kTokensPerHaloPass = kThreads / kChunks;           // 32
  static constexpr int kStageBytes = kHeadDim * kTileTokens;
  static constexpr int kStageRowWords = kTileTokens / kBytesPerWord;      // 32: one bank row
  static constexpr int kWriteoutPerThread =
      kHeadDim * kGroupsPerTile / kThreads;                               // 4
  static_assert(kWarpChunks * kWarpGroups == 8, "a warp is 4 quads x 8 (chunk, group) pairs");
  static_assert(kHeadDim * kGroupsPerTile % kThreads == 0, "writeout mapping");

  int quad;      // k: which quad of its group (0..3)
  int chunk;     // channel chunk (16 channels)
  int group;     // group of 16 tokens in the tile
  int part;      // which of the kParts warps sharing these tokens
  int sub_chunk; // chunk within the warp (the lanes a token's amax is reduced over)

  __device__ __forceinline__ explicit TileGeometry(int tid) {
    const int lane = tid % kWarpSize;
    const int warp = tid / kWarpSize;
    quad = lane % kLanesPerQuadRow;
    const int s = lane / kLanesPerQuadRow;
    sub_chunk = s % kWarpChunks;
    part = warp % kParts;
    chunk = part * kWarpChunks + sub_chunk;
    group = warp / kParts * kWarpGroups + s / kWarpChunks;
  }
  // Tile-local index of the thread's token j (0..3): slot 4k + j of its group holds it.
  __device__ __forceinline__ int token(int j) const {
    return group * kPermutationGroup + permuted_token(quad * kQuadTokens + j);
  }

  // Reduces over the lanes holding the other chunks of the same tokens (lane bits 2..).
  template <typename Op>
  __device__ __forceinline__ static float reduce_chunks(float v, Op op) {
#pragma unroll
    for (int mask = kLanesPerQuadRow; mask < kLanesPerQuadRow * kWarpChunks; mask *= 2)
      v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, mask));
    return v;
  }

  // Word swizzle of staging row d: XOR with the row's chunk (within a warp), scaled so that the
  // chunks of one warp land on distinct 4-word bank groups.
  __device__ __forceinline__ static int stage_swizzle(int d) {
    return (d / kChunkChannels) % kWarpChunks * kWordsPerGroup * kWarpGroups;
  }
  __device__ __forceinline__ static int stage_byte(int d, int slot) {
    const int word = (slot / kBytesPerWord) ^ stage_swizzle(d);
    return d * kTileTokens + word * kBytesPerWord + slot % kBytesPerWord;
  }
};

}  // namespace flamia::quantize
