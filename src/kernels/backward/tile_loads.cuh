// Cooperative (all CTA threads) loads of operand tiles from global memory into K-major,
// swizzled shared-memory tiles that wgmma descriptors read: cp.async copies (async_copy.cuh)
// where a tile is a plain copy, register-staged fetch + store for the BF16 transposes. Tokens
// outside the document (a neighbour document's rows in a tile that starts at floor16, or rows past
// the tensor end) are stored as zeros, so nothing of another document, not even a NaN, reaches a
// product.
//
// The caller waits for its copies (async_copy_wait_all), applies the token-major masks, and
// issues hopper::fence_proxy_async_shared() and a barrier before wgmma reads the tiles.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/views.h"
#include "kernels/hopper/async_copy.cuh"
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

// A read-only global load (the operands never change during the kernel): the compiler may
// batch a thread's loads ahead of its shared-memory stores.
__device__ __forceinline__ uint4 load_vector(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// Vector v (16 bytes) of a tile belongs to thread v % kThreads, slot v / kThreads, in every
// copy below; the token-major masks rely on it (the thread that issued a vector's copy patches
// it).
template <int kVectors>
struct TileVectors {
  static_assert(kVectors % kThreads == 0, "every thread moves the same number of vectors");
  static constexpr int kPerThread = kVectors / kThreads;
  __device__ __forceinline__ static int vector(int slot) {
    return int(threadIdx.x) + slot * kThreads;
  }
};

// Row-major FP8 rows (token `first + row`, kRowBytes = D bytes each, `token_pitch` bytes apart)
// into a tile of kRows rows swizzled for rows of kRowBytes, by cp.async; rows outside `valid`
// are zero-filled. Slot k of a thread is row row0 + k * kSlotRows (a multiple of the swizzle's
// 8-row period), so every slot's shared offset is the first one's plus k * kSlotRows rows.
template <int kRows, int kRowBytes>
struct Fp8RowsCopy : TileVectors<kRows * kRowBytes / kBytesPerVector> {
  static constexpr int kVectorsPerRow = kRowBytes / kBytesPerVector;
  static constexpr int kSlotRows = kThreads / kVectorsPerRow;
  static_assert(kThreads % kVectorsPerRow == 0 && kSlotRows % 8 == 0, "slot rows keep the swizzle");
  using Base = TileVectors<kRows * kRowBytes / kBytesPerVector>;

  __device__ __forceinline__ static void issue(uint8_t* tile, const uint8_t* head_base,
                                               int64_t token_pitch, int first, TokenRange valid) {
    const int row0 = int(threadIdx.x) / kVectorsPerRow;
    const int byte = (int(threadIdx.x) % kVectorsPerRow) * kBytesPerVector;
    uint8_t* const slot0 = tile + hopper::swizzled_offset<kRowBytes>(row0, byte);
#pragma unroll
    for (int k = 0; k < Base::kPerThread; ++k) {
      const int token = first + row0 + k * kSlotRows;
      const bool inside = valid.contains(token);
      hopper::async_copy_16(slot0 + k * kSlotRows * kRowBytes,
                            head_base + (inside ? int64_t(token) * token_pitch + byte : 0), inside);
    }
  }
};

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
// (possibly permuted) token order group by group. Two phases: issue() copies every group with a
// valid token (zero-fills the others); after async_copy_wait_all(), mask_partial_groups() zeroes,
// byte by byte, the invalid tokens of the groups that straddle the document's ends (the same
// bytes as a masked synchronous copy).
template <int kRows, int kTokens, bool kPermuted>
struct Fp8TokenMajorCopy : TileVectors<kRows * kTokens / kBytesPerVector> {
  static constexpr int kGroupsPerRow = kTokens / kPermutationGroup;
  static_assert(kPermutationGroup == kBytesPerVector, "one vector per 16-token group");
  // Slot k of a thread is row row0 + k * kSlotRows of the same group (see Fp8RowsCopy).
  static constexpr int kSlotRows = kThreads / kGroupsPerRow;
  static_assert(kThreads % kGroupsPerRow == 0 && kSlotRows % 8 == 0, "slot rows keep the swizzle");
  using Base = TileVectors<kRows * kTokens / kBytesPerVector>;

  __device__ __forceinline__ static int group_of_thread() {
    return int(threadIdx.x) % kGroupsPerRow;
  }
  __device__ __forceinline__ static uint8_t* first_slot(uint8_t* tile) {
    return tile + hopper::swizzled_offset<kTokens>(int(threadIdx.x) / kGroupsPerRow,
                                                   group_of_thread() * kBytesPerVector);
  }

  __device__ __forceinline__ static void issue(uint8_t* tile, const uint8_t* head_base,
                                               int64_t padded_tokens, int first, TokenRange valid) {
    const int row0 = int(threadIdx.x) / kGroupsPerRow;
    const int group_first = first + group_of_thread() * kPermutationGroup;
    const bool any = group_first < valid.hi && group_first + kPermutationGroup > valid.lo;
    uint8_t* const slot0 = first_slot(tile);
#pragma unroll
    for (int k = 0; k < Base::kPerThread; ++k) {
      const int row = row0 + k * kSlotRows;
      hopper::async_copy_16(slot0 + k * kSlotRows * kTokens,
                            head_base + (any ? int64_t(row) * padded_tokens + group_first : 0),
                            any);
    }
  }
  // Zeroes every token outside `valid` in the thread's slots, whatever wrote them (the FP8
  // path's TMA copies a whole box).
  __device__ __forceinline__ static void mask_outside_tokens(uint8_t* tile, int first,
                                                             TokenRange valid) {
    const int group_first = first + group_of_thread() * kPermutationGroup;
    if (group_first < valid.lo || group_first + kPermutationGroup > valid.hi)
      mask_slots(tile, group_first, valid);
  }
  __device__ __forceinline__ static void mask_partial_groups(uint8_t* tile, int first,
                                                             TokenRange valid) {
    const int group_first = first + group_of_thread() * kPermutationGroup;
    const bool any = group_first < valid.hi && group_first + kPermutationGroup > valid.lo;
    const bool partial = group_first < valid.lo || group_first + kPermutationGroup > valid.hi;
    if (any && partial) mask_slots(tile, group_first, valid);
  }

 private:
  // The thread's slots (one 16-token group, every kSlotRows-th row), tokens outside `valid`
  // zeroed.
  __device__ __forceinline__ static void mask_slots(uint8_t* tile, int group_first,
                                                    TokenRange valid) {
    uint8_t* const slot0 = first_slot(tile);
#pragma unroll
    for (int k = 0; k < Base::kPerThread; ++k) {
      uint4* at = reinterpret_cast<uint4*>(slot0 + k * kSlotRows * kTokens);
      *at = mask_token_group<kPermuted>(*at, group_first, valid);
    }
  }
};

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

constexpr int kBf16PerVector = kBytesPerVector / 2;

// BF16 rows (token first + row, D elements) -> tile [kRows][kD] in panels of 64 elements, by
// cp.async; rows outside `valid` are zero-filled. Slot k of a thread is row row0 + k * kSlotRows
// at the same element: kSlotRows is a multiple of the swizzle's 8-row period, so every slot's
// shared offset is the first one's plus k * kSlotRows rows (one register for all slots).
template <int kRows, int kD>
struct Bf16RowsCopy : TileVectors<kRows * kD / kBf16PerVector> {
  static constexpr int kVectorsPerRow = kD / kBf16PerVector;
  static constexpr int kSlotRows = kThreads / kVectorsPerRow;
  static_assert(kThreads % kVectorsPerRow == 0 && kSlotRows % 8 == 0, "slot rows keep the swizzle");
  using Base = TileVectors<kRows * kD / kBf16PerVector>;

  __device__ __forceinline__ static void issue(uint8_t* tile, const Bf16View& view, int head,
                                               int first, TokenRange valid) {
    const int row0 = int(threadIdx.x) / kVectorsPerRow;
    const int e = (int(threadIdx.x) % kVectorsPerRow) * kBf16PerVector;
    uint8_t* const slot0 = tile + bf16_panel_offset<kRows>(row0, e);
#pragma unroll
    for (int k = 0; k < Base::kPerThread; ++k) {
      const int token = first + row0 + k * kSlotRows;
      const bool inside = valid.contains(token);
      hopper::async_copy_16(slot0 + k * kSlotRows * kPanelBytes,
                            inside ? bf16_row(view, token, head) + 2 * e : bf16_row(view, 0, 0),
                            inside);
    }
  }
};

// BF16 rows (token first + t, D elements) -> transposed K-major tile [kD][kTokens] (tokens
// contiguous, natural order) in panels of 64 tokens. Consecutive threads take consecutive tokens
// of one 8-element slice, so each shared-memory store instruction writes one row segment.
template <int kTokens, int kD>
struct Bf16TransposedCopy : TileVectors<kTokens * kD / kBf16PerVector> {
  using Base = TileVectors<kTokens * kD / kBf16PerVector>;
  uint4 x[Base::kPerThread];

  __device__ __forceinline__ void fetch(const Bf16View& view, int head, int first,
                                        TokenRange valid) {
#pragma unroll
    for (int k = 0; k < Base::kPerThread; ++k) {
      const int v = Base::vector(k);
      const int token = first + v % kTokens;
      const int e0 = (v / kTokens) * kBf16PerVector;
      this->x[k] =
          valid.contains(token) ? load_vector(bf16_row(view, token, head) + 2 * e0) : zero_vector();
    }
  }
  __device__ __forceinline__ void store(uint8_t* tile) const {
#pragma unroll
    for (int k = 0; k < Base::kPerThread; ++k) {
      const int v = Base::vector(k);
      const int t = v % kTokens;
      const int e0 = (v / kTokens) * kBf16PerVector;
      const uint32_t w[4] = {this->x[k].x, this->x[k].y, this->x[k].z, this->x[k].w};
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) {
        const uint16_t bits = uint16_t(w[e / 2] >> (16 * (e % 2)));
        *reinterpret_cast<uint16_t*>(tile + bf16_panel_offset<kD>(e0 + e, t)) = bits;
      }
    }
  }
};

}  // namespace flamia::backward
