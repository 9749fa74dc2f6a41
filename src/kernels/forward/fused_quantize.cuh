// The forward's quantize pass done inside the forward kernel (ForwardParams::fused): the producer
// warpgroup reads the BF16 Q, K and V rows of each tile and writes the same E4M3 bytes and
// exponents the separate pass (docs/numerics.md §3) would have written, straight into the
// shared-memory tiles the TMA would have filled. Short documents gain: the separate pass costs
// more than the whole attention there (docs/results-log.md). Key smoothing is not fused (the API
// runs the separate pass for it).
//
// The BF16 rows of a tile arrive by cp.async in a staging slot (two slots: the next tile's
// rows load while this one is converted; run_fused_producer), each thread copying exactly the
// 16-byte parts it converts later, so no barrier is needed between the copies and the reads.
// Bytes of tokens outside the work item are 0, so masked keys and rows hold finite operands,
// as the TMA path's neighbouring tokens do. block32 (§2): a token's block lies inside its
// document and within kScaleBlockHalo tokens of the tile, so the per-token amax of the tile and
// its halo (read from global memory: rarely inside the item) goes through shared memory first.
#pragma once

#include <cuda_bf16.h>

#include "common/sorted_search.h"
#include "kernels/forward/forward_params.h"
#include "kernels/forward/shared_storage.cuh"
#include "kernels/hopper/async_copy.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/wgmma.cuh"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/scale_blocks.cuh"

namespace flamia::forward {

constexpr int kProducerBarrier = 1;  // named barrier of the producer warpgroup (0: __syncthreads)

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

// The producer reads a tile's BF16 rows coalesced: each token row is split over
// RowLanes::kLanes lanes of one warp, 8 channels (16 bytes) a lane, so one warp load covers
// kTokensPerWarp whole rows, and a row's amax is a reduction over its lanes.
constexpr int kChannelsPerLane = 8;
template <int kHeadDim>
struct RowLanes {
  static constexpr int kLanes = kHeadDim / kChannelsPerLane;  // 16 at D = 128, 8 at D = 64
  static constexpr int kTokensPerWarp = 32 / kLanes;
  static constexpr int kTokensPerStep = kTokensPerWarp * (kWarpgroupThreads / 32);
};

__device__ __forceinline__ const uint4* row_part_address(const Bf16View& src, int head, int t,
                                                         int part) {
  return reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(src.data) +
                                        int64_t(t) * src.token_stride +
                                        int64_t(head) * src.head_stride) +
         part;
}

// One tile's rows in shared memory: row r's BF16 channels at staged + r * kHeadDim * 2, the
// lane's 16-byte part `part` of it at staged_offset.
template <int kHeadDim>
__device__ __forceinline__ int staged_offset(int row, int part) {
  return row * kHeadDim * 2 + part * 16;
}
template <int kHeadDim>
__device__ __forceinline__ uint4 staged_part(const uint8_t* staged, int row, int part) {
  return *reinterpret_cast<const uint4*>(staged + staged_offset<kHeadDim>(row, part));
}

// max |x| over a row: the lane's part, then its row's lanes (NaN ignored, as fmaxf does).
template <int kHeadDim>
__device__ __forceinline__ float row_amax(const float (&x)[kChannelsPerLane]) {
  float a = quantize::values_amax(x);
#pragma unroll
  for (int mask = 1; mask < RowLanes<kHeadDim>::kLanes; mask *= 2)
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, mask));
  return a;
}

// Issues the cp.async copies of the tile's rows inside the item into `staged` (this thread's
// parts: the ones quantize_tile has it convert). The caller commits the group.
template <int kHeadDim, int kRows>
__device__ __forceinline__ void stage_tile(const Bf16View& src, int head, int tile_first,
                                           const ItemTokens& item, uint8_t* staged) {
  using Lanes = RowLanes<kHeadDim>;
  const int tid = threadIdx.x % kWarpgroupThreads;
  const int part = tid % Lanes::kLanes;
  const int row0 = tid / Lanes::kLanes;
#pragma unroll 4
  for (int row = row0; row < kRows; row += Lanes::kTokensPerStep) {
    const int t = tile_first + row;
    if (item.inside(t))
      hopper::async_copy_16(staged + staged_offset<kHeadDim>(row, part),
                            row_part_address(src, head, t, part), true);
  }
}

// Where a tile's bytes go: token rows (Q̂, K̂: one swizzled row per token) or token columns
// (V̂ᵀ: one byte per channel row, in the key's permuted slot).
enum class TileLayout { kRows, kColumns };

// q8(x * 2^-e) of the lane's 8 channels (part `part` of the row) into the tile.
template <int kHeadDim, TileLayout kLayout>
__device__ __forceinline__ void store_part(uint8_t* tile, int row, int part,
                                           const float (&x)[kChannelsPerLane], float inv_scale,
                                           bool inside) {
  uint32_t codes[2] = {0u, 0u};
  if (inside) quantize::encode_scaled(x, inv_scale, codes);
  if constexpr (kLayout == TileLayout::kRows) {
    constexpr int kRowBytes = kHeadDim;  // the Q̂/K̂ swizzle (qk_swizzle)
    *reinterpret_cast<uint2*>(tile +
                              hopper::swizzled_offset<kRowBytes>(row, part * kChannelsPerLane)) =
        make_uint2(codes[0], codes[1]);
  } else {
    const int slot =
        row / kPermutationGroup * kPermutationGroup + permuted_slot(row % kPermutationGroup);
    // Channel rows are 128 bytes apart and swizzled by (row & 7): the lanes of a warp (one per
    // part) start at different channels mod 8, so that they hit different banks. Byte j of
    // `rotated` is channel (j + part) % 8 of the part.
    const uint64_t bytes = uint64_t(codes[1]) << 32 | codes[0];
    const int shift = 8 * (part % kChannelsPerLane);
    const uint64_t rotated = shift == 0 ? bytes : (bytes >> shift | bytes << (64 - shift));
#pragma unroll
    for (int j = 0; j < kChannelsPerLane; ++j) {
      const int i = (j + part) % kChannelsPerLane;
      tile[hopper::swizzled_offset<128>(part * kChannelsPerLane + i, slot)] =
          uint8_t(rotated >> (8 * j));
    }
  }
}

// Quantizes the kRows token rows of one tile (token tile_first + row, for row < kRows) of
// `head` from their staged copy (stage_tile, landed) into `tile`, and each row's exponent into
// exponents[row] (0 outside the item). A row (or block) whose amax is infinite records
// `infinite_status` in device_status (numerics §7), as the separate pass does.
// `amax_window` (block32 only): kRows + 2 * kScaleBlockHalo entries of scratch, `block_of_row`
// kRows entries (each row's block, relative to the window). All producer threads call it (it
// synchronizes them in block32 mode: the rows' amax go through amax_window first, with the
// halo rows of blocks that cross the tile's edges).
template <int kHeadDim, int kRows, TileLayout kLayout>
__device__ __forceinline__ void quantize_tile(const uint8_t* staged, const Bf16View& src, int head,
                                              int tile_first, const ItemTokens& item, bool block32,
                                              uint8_t* tile, int8_t* exponents,
                                              uint32_t* amax_window, uint32_t* block_of_row,
                                              int32_t* device_status,
                                              DeviceStatus infinite_status) {
  using Lanes = RowLanes<kHeadDim>;
  static_assert(kRows % Lanes::kTokensPerStep == 0, "whole steps");
  constexpr int kSteps = kRows / Lanes::kTokensPerStep;
  const int tid = threadIdx.x % kWarpgroupThreads;
  const int part = tid % Lanes::kLanes;  // the lane's 8 channels of its row
  const int row0 = tid / Lanes::kLanes;  // its row in each step: row0 + step * kTokensPerStep
  const int window_first = tile_first - kScaleBlockHalo;
  if (block32) {
    constexpr int kWindowSteps = (kRows + 2 * kScaleBlockHalo) / Lanes::kTokensPerStep;
    for (int step = 0; step < kWindowSteps; ++step) {
      const int i = row0 + step * Lanes::kTokensPerStep;
      const int t = window_first + i;
      const bool inside = item.inside(t);
      if (!__any_sync(0xffffffffu, inside)) continue;  // the halo is mostly outside the item
      const int row = i - kScaleBlockHalo;             // in the tile when 0 <= row < kRows
      uint4 bits = make_uint4(0, 0, 0, 0);
      if (inside && row >= 0 && row < kRows) bits = staged_part<kHeadDim>(staged, row, part);
      if (inside && (row < 0 || row >= kRows)) bits = __ldg(row_part_address(src, head, t, part));
      float x[kChannelsPerLane];
      quantize::unpack_vector(bits, x);
      const float amax = row_amax<kHeadDim>(x);
      if (inside && part == 0) amax_window[i] = quantize::amax_bits(amax);
    }
    for (int row = tid; row < kRows; row += kWarpgroupThreads) {  // one document search a row
      const int t = tile_first + row;
      const quantize::TokenRange block =
          item.inside(t) ? item.block32(t) : quantize::TokenRange{t, t};
      block_of_row[row] = uint32_t(block.begin - window_first) | uint32_t(block.end - window_first)
                                                                     << 16;
    }
    producer_sync();
  }
#pragma unroll 2
  for (int step = 0; step < kSteps; ++step) {
    const int row = row0 + step * Lanes::kTokensPerStep;
    const int t = tile_first + row;
    const bool inside = item.inside(t);
    if (!__any_sync(0xffffffffu, inside)) {  // the warp's rows are all outside: zeros only
      const float zeros[kChannelsPerLane] = {};
      if (part == 0) exponents[row] = 0;
      store_part<kHeadDim, kLayout>(tile, row, part, zeros, 1.0f, false);
      continue;
    }
    float x[kChannelsPerLane];
    quantize::unpack_vector(
        inside ? staged_part<kHeadDim>(staged, row, part) : make_uint4(0, 0, 0, 0), x);
    float amax;
    if (block32) {
      // the block's amax: its (at most 32) window entries spread over the row's lanes
      const uint32_t block = block_of_row[row];
      uint32_t a = 0;
      for (int u = int(block & 0xFFFFu) + part; u < int(block >> 16); u += Lanes::kLanes)
        a = max(a, amax_window[u]);
#pragma unroll
      for (int mask = 1; mask < Lanes::kLanes; mask *= 2)
        a = max(a, __shfl_xor_sync(0xffffffffu, a, mask));
      amax = __uint_as_float(a);
    } else {
      amax = row_amax<kHeadDim>(x);
    }
    if (inside && part == 0 && quantize::is_infinite_amax(quantize::amax_bits(amax)))
      quantize::record_infinite_input(device_status, infinite_status);
    const int e = inside ? scale_exponent(amax) : 0;
    if (part == 0) exponents[row] = int8_t(e);
    store_part<kHeadDim, kLayout>(tile, row, part, x, exp2_int(-e), inside);
  }
  if (block32) producer_sync();  // amax_window is free again
}

}  // namespace flamia::forward
