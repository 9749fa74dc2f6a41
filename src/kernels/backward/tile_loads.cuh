// Cooperative (all CTA threads) loads of operand tiles from global memory into K-major,
// swizzled shared-memory tiles that wgmma descriptors read. Tokens outside the document (a
// neighbour document's rows in a tile that starts at floor16, or rows past the tensor end) are
// stored as zeros, so nothing of another document, not even a NaN, reaches a product.
//
// The caller issues hopper::fence_proxy_async_shared() and a barrier before wgmma reads them.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/views.h"
#include "kernels/backward/backward_config.h"
#include "kernels/hopper/wgmma.cuh"

namespace flamia::backward {

struct TokenRange {
  int lo, hi;  // valid tokens [lo, hi)
  __device__ __forceinline__ bool contains(int t) const { return t >= lo && t < hi; }
};

__device__ __forceinline__ uint4 zero_vector() {
  return make_uint4(0u, 0u, 0u, 0u);
}

// Row-major FP8 rows (token `first + row`, kRowBytes = D bytes each, `token_pitch` bytes apart)
// into a tile of kRows rows swizzled for rows of kRowBytes.
template <int kRows, int kRowBytes>
__device__ __forceinline__ void load_fp8_rows(uint8_t* tile, const uint8_t* head_base,
                                              int64_t token_pitch, int first, TokenRange valid) {
  constexpr int kVectorsPerRow = kRowBytes / kBytesPerVector;
  for (int v = threadIdx.x; v < kRows * kVectorsPerRow; v += kThreads) {
    const int row = v / kVectorsPerRow;
    const int byte = (v % kVectorsPerRow) * kBytesPerVector;
    const int token = first + row;
    uint4 x = zero_vector();
    if (valid.contains(token))
      x = *reinterpret_cast<const uint4*>(head_base + int64_t(token) * token_pitch + byte);
    *reinterpret_cast<uint4*>(tile + hopper::swizzled_offset<kRowBytes>(row, byte)) = x;
  }
}

// Zeroes the bytes of one 16-token group whose token lies outside `valid`. Slot s of the group
// holds token group_first + permuted_token(s) (permuted copies) or group_first + s.
template <bool kPermuted>
__device__ __forceinline__ uint4 mask_token_group(uint4 x, int group_first, TokenRange valid) {
  uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int s = 0; s < kPermutationGroup; ++s) {
    const int token = group_first + (kPermuted ? permuted_token(s) : s);
    if (!valid.contains(token)) w[s / 4] &= ~(0xFFu << (8 * (s % 4)));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Token-major FP8 copy [d][padded tokens] (head base given) -> tile [kRows = D][kTokens]
// swizzled for rows of kTokens bytes. `first` is a multiple of 16, so the tile keeps the copy's
// (possibly permuted) token order group by group.
template <int kRows, int kTokens, bool kPermuted>
__device__ __forceinline__ void load_fp8_token_major(uint8_t* tile, const uint8_t* head_base,
                                                     int64_t padded_tokens, int first,
                                                     TokenRange valid) {
  constexpr int kGroupsPerRow = kTokens / kPermutationGroup;
  static_assert(kPermutationGroup == kBytesPerVector, "one vector per 16-token group");
  for (int v = threadIdx.x; v < kRows * kGroupsPerRow; v += kThreads) {
    const int d = v / kGroupsPerRow;
    const int group = v % kGroupsPerRow;
    const int group_first = first + group * kPermutationGroup;
    uint4 x = zero_vector();
    if (group_first < valid.hi && group_first + kPermutationGroup > valid.lo) {
      x = *reinterpret_cast<const uint4*>(head_base + int64_t(d) * padded_tokens + group_first);
      if (group_first < valid.lo || group_first + kPermutationGroup > valid.hi)
        x = mask_token_group<kPermuted>(x, group_first, valid);
    }
    *reinterpret_cast<uint4*>(tile + hopper::swizzled_offset<kTokens>(d, group * kBytesPerVector)) =
        x;
  }
}

// Byte offset of element (row, e) of a BF16 K-major tile of kRows rows stored as panels of 64
// elements (128-byte swizzled rows).
template <int kRows>
__device__ __forceinline__ uint32_t bf16_panel_offset(int row, int e) {
  return uint32_t((e / kBf16PerPanel) * kRows * kPanelBytes) +
         hopper::swizzled_offset<kPanelBytes>(row, (e % kBf16PerPanel) * 2);
}

__device__ __forceinline__ const uint8_t* bf16_row(const Bf16View& view, int token, int head) {
  return static_cast<const uint8_t*>(view.data) +
         2 * (int64_t(token) * view.token_stride + int64_t(head) * view.head_stride);
}

// BF16 rows (token first + row, D elements) -> K-major tile [kRows][kD] in panels.
template <int kRows, int kD>
__device__ __forceinline__ void load_bf16_rows(uint8_t* tile, const Bf16View& view, int head,
                                               int first, TokenRange valid) {
  constexpr int kElementsPerVector = kBytesPerVector / 2;
  constexpr int kVectorsPerRow = kD / kElementsPerVector;
  for (int v = threadIdx.x; v < kRows * kVectorsPerRow; v += kThreads) {
    const int row = v / kVectorsPerRow;
    const int e = (v % kVectorsPerRow) * kElementsPerVector;
    const int token = first + row;
    uint4 x = zero_vector();
    if (valid.contains(token))
      x = *reinterpret_cast<const uint4*>(bf16_row(view, token, head) + 2 * e);
    *reinterpret_cast<uint4*>(tile + bf16_panel_offset<kRows>(row, e)) = x;
  }
}

// BF16 rows (token first + t, D elements) -> transposed K-major tile [kD][kTokens] (tokens
// contiguous, natural order) in panels of 64 tokens. Consecutive threads take consecutive tokens
// of one 8-element slice, so each shared-memory store instruction writes one row segment.
template <int kTokens, int kD>
__device__ __forceinline__ void load_bf16_transposed(uint8_t* tile, const Bf16View& view, int head,
                                                     int first, TokenRange valid) {
  constexpr int kElementsPerVector = kBytesPerVector / 2;
  for (int v = threadIdx.x; v < kTokens * (kD / kElementsPerVector); v += kThreads) {
    const int t = v % kTokens;
    const int e0 = (v / kTokens) * kElementsPerVector;
    const int token = first + t;
    uint4 x = zero_vector();
    if (valid.contains(token))
      x = *reinterpret_cast<const uint4*>(bf16_row(view, token, head) + 2 * e0);
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int e = 0; e < kElementsPerVector; ++e) {
      const uint16_t bits = uint16_t(w[e / 2] >> (16 * (e % 2)));
      *reinterpret_cast<uint16_t*>(tile + bf16_panel_offset<kD>(e0 + e, t)) = bits;
    }
  }
}

}  // namespace flamia::backward
