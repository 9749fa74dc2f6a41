// The forward's quantize pass done inside the forward kernel (ForwardParams::fused): the producer
// warpgroup reads the BF16 Q, K and V rows of each tile and writes the same E4M3 bytes and
// exponents the separate pass (docs/numerics.md §3) would have written, straight into the
// shared-memory tiles the TMA would have filled. Short documents gain: the separate pass costs
// more than the whole attention there (docs/results.md). Key smoothing is not fused (the API
// runs the separate pass for it).
//
// One token row per producer thread (and loop). Bytes of tokens outside the work item are 0,
// so masked keys and rows hold finite operands, as the TMA path's neighbouring tokens do.
// block32 (§2): a token's block lies inside its document and within kScaleBlockHalo tokens of
// the tile, so the per-token amax of the tile and its halo goes through shared memory first.
#pragma once

#include <cuda_bf16.h>

#include "common/sorted_search.h"
#include "kernels/forward/forward_params.h"
#include "kernels/forward/shared_storage.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/wgmma.cuh"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/scale_blocks.cuh"

namespace flamia::forward {

constexpr int kProducerBarrier = 1;  // named barrier of the producer warpgroup (0: __syncthreads)
using quantize::kChunkChannels;

__device__ __forceinline__ void producer_sync() {
  hopper::named_barrier_sync(kProducerBarrier, kWarpgroupThreads);
}

// Tokens [begin, end) of a tile's tensor that belong to the work item, and the documents that
// hold them (cu[first_doc .. first_doc + doc_count]).
struct ItemTokens {
  int begin;
  int end;
  const int32_t* cu;
  int first_doc;
  int doc_count;
  __device__ __forceinline__ bool inside(int t) const { return t >= begin && t < end; }
  // The block32 scale block of token t (inside the item).
  __device__ __forceinline__ quantize::TokenRange block32(int t) const {
    const int doc = first_doc - 1 +
                    upper_bound_by([&](int i) { return __ldg(cu + first_doc + i); }, doc_count, t);
    return quantize::scale_block(quantize::BlockKind::kBlock32, t, __ldg(cu + doc),
                                 __ldg(cu + doc + 1));
  }
};

// 16 channels of token t's BF16 row as FP32.
template <int kHeadDim>
__device__ __forceinline__ void load_row_chunk(const Bf16View& src, int head, int t, int chunk,
                                               float (&x)[kChunkChannels]) {
  const uint4* p = reinterpret_cast<const uint4*>(
      static_cast<const __nv_bfloat16*>(src.data) + int64_t(t) * src.token_stride +
      int64_t(head) * src.head_stride + chunk * kChunkChannels);
  quantize::unpack_chunk(quantize::Bf16Chunk{{__ldg(p), __ldg(p + 1)}}, x);
}

template <int kHeadDim>
__device__ __forceinline__ float token_amax(const Bf16View& src, int head, int t) {
  float amax = 0.0f;
#pragma unroll 2
  for (int chunk = 0; chunk < kHeadDim / kChunkChannels; ++chunk) {
    float x[kChunkChannels];
    load_row_chunk<kHeadDim>(src, head, t, chunk, x);
    amax = fmaxf(amax, quantize::chunk_amax(x));
  }
  return amax;
}

// Where a tile's bytes go: token rows (Q̂, K̂: one swizzled row per token) or token columns
// (V̂ᵀ: one byte per channel row, in the key's permuted slot).
enum class TileLayout { kRows, kColumns };

template <int kHeadDim, TileLayout kLayout>
__device__ __forceinline__ void store_codes(uint8_t* tile, int row, int chunk,
                                            const uint32_t (&codes)[quantize::kCodeWords]) {
  if constexpr (kLayout == TileLayout::kRows) {
    constexpr int kRowBytes = kHeadDim;  // the Q̂/K̂ swizzle (qk_swizzle)
    *reinterpret_cast<uint4*>(tile + hopper::swizzled_offset<kRowBytes>(row, chunk * 16)) =
        make_uint4(codes[0], codes[1], codes[2], codes[3]);
  } else {
    const int slot =
        row / kPermutationGroup * kPermutationGroup + permuted_slot(row % kPermutationGroup);
#pragma unroll
    for (int i = 0; i < kChunkChannels; ++i)
      tile[hopper::swizzled_offset<128>(chunk * kChunkChannels + i, slot)] =
          uint8_t(codes[i / 4] >> (8 * (i % 4)));
  }
}

// Quantizes the kRows token rows of one tile (token tile_first + row, for row < kRows) of
// `head` into `tile`, and each row's exponent into exponents[row] (0 outside the item).
// `amax_window` (block32 only): kRows + 2 * kScaleBlockHalo entries of scratch. All producer
// threads call it (it synchronizes them).
template <int kHeadDim, int kRows, TileLayout kLayout>
__device__ __forceinline__ void quantize_tile(const Bf16View& src, int head, int tile_first,
                                              const ItemTokens& item, bool block32, uint8_t* tile,
                                              int8_t* exponents, uint32_t* amax_window) {
  constexpr int kChunks = kHeadDim / kChunkChannels;
  const int tid = threadIdx.x % kWarpgroupThreads;
  const int window_first = tile_first - kScaleBlockHalo;
  if (block32) {
    for (int i = tid; i < kRows + 2 * kScaleBlockHalo; i += kWarpgroupThreads) {
      const int t = window_first + i;
      if (item.inside(t)) amax_window[i] = quantize::amax_bits(token_amax<kHeadDim>(src, head, t));
    }
    producer_sync();
  }
  for (int row = tid; row < kRows; row += kWarpgroupThreads) {
    const int t = tile_first + row;
    const bool inside = item.inside(t);
    int e = 0;
    if (inside && block32) {
      const quantize::TokenRange block = item.block32(t);
      uint32_t bits = 0;
      for (int u = block.begin; u < block.end; ++u) bits = max(bits, amax_window[u - window_first]);
      e = scale_exponent(__uint_as_float(bits));
    } else if (inside) {
      e = scale_exponent(token_amax<kHeadDim>(src, head, t));
    }
    exponents[row] = int8_t(e);
    const float inv_scale = exp2_int(-e);
#pragma unroll 2
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      uint32_t codes[quantize::kCodeWords] = {0u, 0u, 0u, 0u};
      if (inside) {
        float x[kChunkChannels];
        load_row_chunk<kHeadDim>(src, head, t, chunk, x);
        quantize::encode_chunk(x, inv_scale, codes);
      }
      store_codes<kHeadDim, kLayout>(tile, row, chunk, codes);
    }
  }
  if (block32) producer_sync();  // amax_window is free again
}

}  // namespace flamia::forward
