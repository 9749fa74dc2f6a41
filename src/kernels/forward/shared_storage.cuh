// Shared-memory layout of the forward kernel: operand tiles (1024-byte aligned for the 128B
// swizzle), per-key factors and the pipeline's mbarriers.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/forward/document_packing.h"
#include "kernels/forward/forward_config.h"
#include "kernels/forward/work_items.cuh"

namespace flamia::forward {

// Fused quantization (fused_quantize.cuh): a block32 block reaches fewer than 32 tokens past the
// edge of a tile, so a tile's per-token amax window spans the tile and this halo on each side.
constexpr int kScaleBlockHalo = kBlock32Tokens;
enum FusedAmaxWindow { kAmaxOfQ, kAmaxOfK, kAmaxOfV, kAmaxWindows };

template <int kHeadDim, bool kStaticScales = false>
struct alignas(1024) SharedStorage {
  using Tile = ForwardTile<kHeadDim, kStaticScales>;
  alignas(1024) uint8_t q[Tile::kQBuffers][Tile::kQTileBytes];
  alignas(1024) uint8_t k[Tile::kStages][Tile::kKTileBytes];
  alignas(1024) uint8_t vt[Tile::kStages][Tile::kVtSubtiles][Tile::kVtSubtileBytes];
  KeyPairFactors factors[Tile::kStages][Tile::kBlockN / 2];
  // Per producer warp: its keys outside the row-sum window (a ballot; 0 almost always).
  alignas(16) uint32_t row_sum_fallback[Tile::kStages][kWarpgroupThreads / 32];
  // Fused quantization only: the exponents of each stage's keys and values (the producer's
  // factors), and the block32 amax windows.
  static constexpr int kWindowRows =
      (Tile::kBlockM > Tile::kBlockN ? Tile::kBlockM : Tile::kBlockN) + 2 * kScaleBlockHalo;
  // Fused quantization: two slots of BF16 rows (one tile's; fused_quantize.cuh). The other
  // kernels stage each work item's O tile in them, alternating (epilogue.cuh).
  // With one O staging slot (Tile::kOutputStagingSlots) the two slots together hold the O tile
  // (kStatic's tile, never the fused kernel's).
  static constexpr int kStagedRows =
      Tile::kOutputStagingSlots == 1
          ? Tile::kBlockM / 2
          : (Tile::kBlockM > Tile::kBlockN ? Tile::kBlockM : Tile::kBlockN);
  alignas(128) uint8_t fused_stage[2][kStagedRows * kHeadDim * 2];
  static_assert(kStagedRows * (Tile::kOutputStagingSlots == 1 ? 2 : 1) >= Tile::kBlockM,
                "the slots hold a BF16 O tile");
  // Per Q buffer, written by the producer with the Q tile (write_item_rows): the work item, and
  // each query row's visible keys and exponent, so that a consumer's item starts with shared
  // memory reads instead of chains of dependent global loads.
  WorkItem item[Tile::kQBuffers];
  RowKeyRange row_keys[Tile::kQBuffers][Tile::kBlockM];
  int8_t q_row_exp[Tile::kQBuffers][Tile::kBlockM];
  int8_t fused_key_exp[Tile::kStages][Tile::kBlockN];
  int8_t fused_value_exp[Tile::kStages][Tile::kBlockN];
  uint32_t fused_amax[kAmaxWindows][kWindowRows];
  uint32_t fused_block[kAmaxWindows][kWindowRows - 2 * kScaleBlockHalo];
  uint64_t q_full[Tile::kQBuffers];   // Q tile landed and the item's rows written
  uint64_t q_empty[Tile::kQBuffers];  // both consumers finished their last S = Q̂K̂ᵀ of the item
  uint64_t k_full[Tile::kStages];     // K̂ tile landed and its per-key factors written
  uint64_t k_empty[Tile::kStages];
  uint64_t v_full[Tile::kStages];  // V̂ᵀ landed and the producer's row-sum rows written
  uint64_t v_empty[Tile::kStages];
  // kDynamicItems only (placed last, so the other kernels' layout is unchanged): each Q buffer's
  // item index as the producer hands it over (kNoMoreItems after the CTA's last item), and the
  // producer's next item index, alternating (run_producer).
  int handed_index[Tile::kQBuffers];
  int next_item[2];
};

}  // namespace flamia::forward
