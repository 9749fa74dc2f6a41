// Writers of the quantized layouts (docs/numerics.md §3):
//  - row-major [tokens][heads][D]: each thread stores its 16 codes of a token directly (16 B);
//  - token-major [heads][D][pad16(tokens)]: codes are transposed into a shared staging tile
//    [D][kTileTokens] (permuted or natural slot order), then written out as whole 16-byte
//    groups, 8 lanes covering one 128-byte row segment;
//  - exponents [heads][tokens].
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/tile_geometry.cuh"

namespace flamia::quantize {

__device__ __forceinline__ void store_row_major(uint8_t* base, int64_t token, int heads, int head,
                                                int head_dim, int chunk,
                                                const uint32_t (&codes)[kCodeWords]) {
  uint4* p =
      reinterpret_cast<uint4*>(base + (token * heads + head) * head_dim + chunk * kChunkChannels);
  *p = make_uint4(codes[0], codes[1], codes[2], codes[3]);
}

// Puts the codes of the thread's 4 tokens (codes[j] = token j's 16 channels) into the staging
// tile. Permuted: tokens j = 0..3 fill slots 4k..4k+3, one word per channel. Natural: tokens
// (2k, 2k+1) and (2k+8, 2k+9) are two byte pairs per channel.
template <int kHeadDim>
__device__ __forceinline__ void stage_codes(uint8_t* stage, const TileGeometry<kHeadDim>& g,
                                            int chunk, TokenOrder order,
                                            const uint32_t (&codes)[kQuadTokens][kCodeWords]) {
  using Geometry = TileGeometry<kHeadDim>;
  // The thread's rows d = 16 chunk + i share one swizzle, so every store is one base address
  // plus an immediate offset i * kTileTokens.
  const int first_row = chunk * kChunkChannels;
  uint8_t* rows = stage + first_row * kTileTokens;
  const int group_slot = g.group * kPermutationGroup;
  constexpr int kUpperPairOffset = kPermutationGroup / 2;  // natural: tokens 2k+8, 2k+9
  const int permuted_column =
      Geometry::stage_byte(first_row, group_slot + g.quad * kQuadTokens) - first_row * kTileTokens;
  const int natural_column =
      Geometry::stage_byte(first_row, group_slot + 2 * g.quad) - first_row * kTileTokens;
  const int natural_upper_column =
      Geometry::stage_byte(first_row, group_slot + 2 * g.quad + kUpperPairOffset) -
      first_row * kTileTokens;
#pragma unroll
  for (int w = 0; w < kCodeWords; ++w) {
    const uint32_t in[4] = {codes[0][w], codes[1][w], codes[2][w], codes[3][w]};
    uint32_t by_channel[4];  // by_channel[b] = channel 4w + b of tokens 0..3
    transpose_bytes(in, by_channel);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      uint8_t* row = rows + (4 * w + b) * kTileTokens;
      if (order == TokenOrder::kPermuted) {
        *reinterpret_cast<uint32_t*>(row + permuted_column) = by_channel[b];
      } else {
        *reinterpret_cast<uint16_t*>(row + natural_column) = uint16_t(by_channel[b] & 0xFFFFu);
        *reinterpret_cast<uint16_t*>(row + natural_upper_column) = uint16_t(by_channel[b] >> 16);
      }
    }
  }
}

// Writes the staged tile to the token-major copy: rows (head, d), columns
// [tile_begin, tile_begin + kTileTokens) clipped to the padded token count.
template <int kHeadDim>
__device__ __forceinline__ void write_token_major(const uint8_t* stage, uint8_t* base, int head,
                                                  int tile_begin, int64_t padded) {
  using Geometry = TileGeometry<kHeadDim>;
#pragma unroll
  for (int n = 0; n < Geometry::kWriteoutPerThread; ++n) {
    const int q = int(threadIdx.x) + n * Geometry::kThreads;
    const int group = q % kGroupsPerTile;
    const int d = q / kGroupsPerTile;
    const int64_t column = int64_t(tile_begin) + group * kPermutationGroup;
    if (column < padded) {
      const uint4 v = *reinterpret_cast<const uint4*>(
          stage + Geometry::stage_byte(d, group * kPermutationGroup));
      *reinterpret_cast<uint4*>(base + (int64_t(head) * kHeadDim + d) * padded + column) = v;
    }
  }
}

// Once every thread of the CTA has staged its codes: writes the tile out (write_token_major);
// the staging tile is free again on return.
template <int kHeadDim>
__device__ __forceinline__ void flush_token_major(const uint8_t* stage, uint8_t* base, int head,
                                                  int tile_begin, int tokens) {
  __syncthreads();
  write_token_major<kHeadDim>(stage, base, head, tile_begin, padded_tokens(tokens));
  __syncthreads();
}

}  // namespace flamia::quantize
