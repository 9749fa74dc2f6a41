// Consumer warpgroup: for each key tile, S = Q̂K̂ᵀ (FP8 wgmma, SS), the online softmax, and
// [O | l] += P̂·[V̂ | row-sum rows] (FP8 wgmma, A from registers); then the epilogue. Each consumer
// owns 64 query rows.
#pragma once

#include <type_traits>

#include "kernels/forward/debug_probabilities.cuh"
#include "kernels/forward/epilogue.cuh"
#include "kernels/forward/online_softmax.cuh"
#include "kernels/forward/shared_storage.cuh"
#include "kernels/forward/work_items.cuh"
#include "kernels/common/timeline.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace flamia::forward {

template <int kHeadDim>
__device__ __forceinline__ hopper::Swizzle qk_swizzle() {
  return kHeadDim == 128 ? hopper::Swizzle::k128B : hopper::Swizzle::k64B;
}

template <int kHeadDim, int kBlockN>
__device__ __forceinline__ void mma_scores(float (&s)[kBlockN / 2], uint64_t desc_q,
                                           uint64_t desc_k) {
  hopper::warpgroup_fence();
#pragma unroll
  for (int kk = 0; kk < kHeadDim / kMmaK; ++kk) {
    const uint64_t a = hopper::advance_desc(desc_q, kk * kMmaK);
    const uint64_t b = hopper::advance_desc(desc_k, kk * kMmaK);
    if constexpr (kBlockN == 64) hopper::wgmma_fp8_ss_n64(s, a, b, kk > 0);
    if constexpr (kBlockN == 128) hopper::wgmma_fp8_ss_n128(s, a, b, kk > 0);
    if constexpr (kBlockN == 160) hopper::wgmma_fp8_ss_n160(s, a, b, kk > 0);
    if constexpr (kBlockN == 192) hopper::wgmma_fp8_ss_n192(s, a, b, kk > 0);
    if constexpr (kBlockN == 256) hopper::wgmma_fp8_ss_n256(s, a, b, kk > 0);
  }
  hopper::warpgroup_commit();
}

// [O | row sums] += P̂·[V̂ | row-sum rows] over one key tile: k32 steps walk the V̂ᵀ sub-tiles
// (128 keys, 128B swizzle; a narrower tail sub-tile uses the 64B or 32B swizzle); N is the head
// dim plus the row-sum columns, whose B rows follow the V̂ᵀ rows in each sub-tile.
template <int kHeadDim>
__device__ __forceinline__ void mma_output(
    float (&acc)[ForwardTile<kHeadDim>::kAccumulatorRegisters],
    const uint32_t (&a)[ForwardTile<kHeadDim>::kBlockN / 32][4],
    const uint8_t (
        &vt)[ForwardTile<kHeadDim>::kVtSubtiles][ForwardTile<kHeadDim>::kVtSubtileBytes]) {
  using Tile = ForwardTile<kHeadDim>;
  hopper::warpgroup_fence();
#pragma unroll
  for (int kk = 0; kk < Tile::kBlockN / kMmaK; ++kk) {
    const int sub = kk * kMmaK / Tile::kVtSubtileKeys;
    const bool tail = sub == Tile::kVtSubtiles - 1 && Tile::kVtTailKeys != Tile::kVtSubtileKeys;
    constexpr hopper::Swizzle kTailSwizzle =
        Tile::kVtTailKeys == 64 ? hopper::Swizzle::k64B : hopper::Swizzle::k32B;
    const uint64_t desc = hopper::make_smem_desc(hopper::smem_addr(vt[sub]),
                                                 tail ? kTailSwizzle : hopper::Swizzle::k128B);
    const uint64_t b = hopper::advance_desc(desc, (kk * kMmaK) % Tile::kVtSubtileKeys);
    if constexpr (kHeadDim == 128) hopper::wgmma_fp8_rs_n136(acc, a[kk], b, 1);
    if constexpr (kHeadDim == 64) hopper::wgmma_fp8_rs_n72(acc, a[kk], b, 1);
  }
  hopper::warpgroup_commit();
}

// Where a consumer thread's two accumulator rows sit in every query tile.
struct ConsumerRows {
  int tile_row0;    // first row of this consumer warpgroup in the tile
  int thread_row0;  // the thread's first row in the tile (the second is 8 further)
  int lane;
};

// One work item: a document's query tile, or (kSegment) a segment of packed short documents or a
// query tile whose rows' sliding windows start inside its key tiles (per-row key ranges). The
// two run separate instantiations so that the tile loop of long documents carries nothing of the
// segments' row ranges. (Measured: one shared loop with a per-tile segment branch made the
// head-dim-128 forward 4% slower on documents of 1k tokens and more.) `iteration` counts key
// tiles over the CTA's items (the K/V ring position); `item_count` its items (the Q buffer).
// kStagedOutput: the epilogue through shared memory (write_outputs_staged), in the kernels without
// fused quantization, whose producer leaves the two fused staging slots unused.
// Storage::Tile::kStaticScales: scale mode kStatic's tile (static_softmax_rows: no per-key
// factors in the softmax).
template <int kHeadDim, bool kDebugProbabilities, bool kSegment, bool kStagedOutput,
          typename Storage>
__device__ __forceinline__ void run_work_item(const ForwardParams& p, Storage& smem,
                                              const WorkItem& w, const ConsumerRows& rows,
                                              int index, int item_count, int& iteration) {
  using Tile = typename Storage::Tile;
  constexpr bool kStaticScales = Tile::kStaticScales;
  constexpr int kBlockN = Tile::kBlockN;
  const int lane = rows.lane;
  const int tile_row0 = rows.tile_row0;
  const int row_local[2] = {w.geo.q0 + rows.thread_row0, w.geo.q0 + rows.thread_row0 + 8};
  const int q_buffer = item_count % Tile::kQBuffers;  // landed: run_consumer waited for it
  // Each row's visible keys (kCausal: keys up to the row) and factor, from what the producer
  // wrote with the Q tile.
  RowKeyRange row_keys[kRowsPerThread];
  RowState state;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    row_keys[r] = smem.row_keys[q_buffer][rows.thread_row0 + 8 * r];
    state.row_factor[r] =
        query_row_factor(p.scale_log2, smem.q_row_exp[q_buffer][rows.thread_row0 + 8 * r]);
    state.row_max[r] = -INFINITY;
    state.row_sum[r] = 0.0f;
  }
  // Scale mode kStatic: a segment's rows' keys clamped to the document (its tiles' keys outside
  // it are masked by these ranges instead of by their factors; a document item's edge tiles form
  // theirs from the rows, in the softmax below).
  if constexpr (kStaticScales && kSegment) {
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r)
      row_keys[r] = {max(row_keys[r].first, 0), min(row_keys[r].last, w.geo.k_len - 1)};
  }
  // O accumulator, then this tile's row-sum registers (zeroed before each P̂·V̂ MMA).
  float acc[Tile::kAccumulatorRegisters];
#pragma unroll
  for (int i = 0; i < Tile::kAccumulatorRegisters; ++i) acc[i] = 0.0f;

  const uint64_t desc_q = hopper::make_smem_desc(
      hopper::smem_addr(smem.q[q_buffer] + tile_row0 * kHeadDim), qk_swizzle<kHeadDim>());
  // This consumer's rows see only the item's first `visible_tiles` key tiles; it releases the
  // rest (wholly masked for them) without computing them, after the loop.
  const int visible_tiles =
      kSegment ? w.geo.n_tiles
               : visible_key_tiles<kBlockN>(w.geo, tile_row0, kRowsPerConsumer, p.causal != 0);
  uint32_t a[kBlockN / 32][4];
  float reference_inv_value_scale;  // 2^-ev_ref of the tile (producer.cuh)
  // Scores of tile n (already in s) -> t, p, the P̂ operand `a`, and what l needs from the
  // factors; releases the K stage (whose factors this reads). Returns the O ratio.
  auto softmax = [&](float(&s)[kBlockN / 2], int n, int stage, float(&ratio)[kRowsPerThread]) {
    if (n == visible_tiles - 1) hopper::mbarrier_arrive(&smem.q_empty[q_buffer]);
    const KeyPairFactors* factors = smem.factors[stage];
    const int first_key_local = w.geo.k_tile_base + n * kBlockN - w.geo.k_start;
    const int reference = first_key_local < 0 ? -first_key_local : 0;  // first document key
    if constexpr (kStaticScales) {
      // every document key's factors are the head's: those of the tile's first one
      const float key_scale = factors[reference / 2].key_scale[reference & 1];
      const float value_exponent = factors[reference / 2].value_exponent[reference & 1];
      const bool edge =
          first_key_local < 0 || first_key_local + kBlockN > w.geo.k_len || n >= w.geo.causal_from;
      if (kSegment) {  // all on the MUFU, as below
        static_scores_to_probabilities<kBlockN, KeyMask::kRowRange>(
            s, state, ratio, key_scale, value_exponent, lane, first_key_local, row_keys);
      } else if (edge) {  // each row's last key and the document's first
        // (document_row_keys' are causal: a non-causal row sees the whole document)
        const RowKeyRange keys[kRowsPerThread] = {
            {0, min(p.causal != 0 ? row_local[0] : w.geo.k_len - 1, w.geo.k_len - 1)},
            {0, min(p.causal != 0 ? row_local[1] : w.geo.k_len - 1, w.geo.k_len - 1)}};
        static_scores_to_probabilities<kBlockN, KeyMask::kCausal, Tile::kPolynomialExpEvery>(
            s, state, ratio, key_scale, value_exponent, lane, first_key_local, keys);
      } else {
        static_scores_to_probabilities<kBlockN, KeyMask::kNone, Tile::kPolynomialExpEvery>(
            s, state, ratio, key_scale, value_exponent, lane, first_key_local, row_keys);
      }
    } else if constexpr (kSegment) {  // all on the MUFU: a column's place depends on the packing
      softmax_scores_to_probabilities<kBlockN, KeyMask::kRowRange>(s, state, ratio, factors, lane,
                                                                   first_key_local, row_keys);
    } else if (n >= w.geo.causal_from) {
      softmax_scores_to_probabilities<kBlockN, KeyMask::kCausal, Tile::kPolynomialExpEvery>(
          s, state, ratio, factors, lane, first_key_local, row_keys);
    } else {
      softmax_scores_to_probabilities<kBlockN, KeyMask::kNone, Tile::kPolynomialExpEvery>(
          s, state, ratio, factors, lane, first_key_local, row_keys);
    }
    probabilities_to_operand<kBlockN>(s, a);
    reference_inv_value_scale = factors[reference / 2].inv_value_scale[reference & 1];
    const uint4 fallback = *reinterpret_cast<const uint4*>(smem.row_sum_fallback[stage]);
    if (fallback.x | fallback.y | fallback.z | fallback.w)
      add_fallback_row_sums<kBlockN>(a, factors, lane, state);
    hopper::mbarrier_arrive(&smem.k_empty[stage]);
  };
  auto k_desc = [&](int stage) {
    return hopper::make_smem_desc(hopper::smem_addr(smem.k[stage]), qk_swizzle<kHeadDim>());
  };
  auto stage_of = [](int it) { return it % Tile::kStages; };
  auto phase_of = [](int it) { return uint32_t(it / Tile::kStages) & 1; };

  // Per key tile: S = Q̂K̂ᵀ, softmax, O += P̂V̂. The two consumer warpgroups overlap each other
  // (one's softmax runs while the other's MMAs occupy the tensor cores). Measured: overlapping
  // P̂V̂ of tile n-1 with the softmax of tile n inside a warpgroup gained nothing here and costs
  // the registers that wider key tiles need.
  for (int n = 0; n < visible_tiles; ++n, ++iteration) {
    const int stage = stage_of(iteration);
    float s[kBlockN / 2];
    float ratio[kRowsPerThread];
    hopper::mbarrier_wait(&smem.k_full[stage], phase_of(iteration));
    mma_scores<kHeadDim, kBlockN>(s, desc_q, k_desc(stage));
    hopper::warpgroup_wait<0>();
    hopper::fence_registers(s);
    softmax(s, n, stage, ratio);
    if constexpr (kDebugProbabilities)
      write_debug_probabilities<kBlockN>(p, w, s, state, n, row_local, row_keys, lane);
    rescale_output(acc, ratio);
#pragma unroll
    for (int i = Tile::kOutRegisters; i < Tile::kAccumulatorRegisters; ++i) acc[i] = 0.0f;
    hopper::mbarrier_wait(&smem.v_full[stage], phase_of(iteration));
    mma_output<kHeadDim>(acc, a, smem.vt[stage]);
    hopper::warpgroup_wait<0>();
    hopper::fence_registers(acc);
    hopper::mbarrier_arrive(&smem.v_empty[stage]);
    add_tile_row_sums<Tile::kOutRegisters>(state, acc, reference_inv_value_scale);
  }
  // Then the Q tile is released, and the key tiles past this consumer's rows once the producer
  // has filled them (so that each arrival counts toward that use of the stage, not the previous
  // one). Their count comes from shared memory, read before the release lets the producer refill
  // the buffer: held in a register over the loop, it made the consumers spill.
  const int masked_tiles = w.geo.n_tiles - visible_tiles;
  if (visible_tiles == 0) hopper::mbarrier_arrive(&smem.q_empty[q_buffer]);
#pragma unroll 1
  for (int n = 0; n < masked_tiles; ++n, ++iteration) {
    const int stage = stage_of(iteration);
    hopper::mbarrier_wait(&smem.k_full[stage], phase_of(iteration));
    hopper::mbarrier_arrive(&smem.k_empty[stage]);
    hopper::mbarrier_wait(&smem.v_full[stage], phase_of(iteration));
    hopper::mbarrier_arrive(&smem.v_empty[stage]);
  }
  if (threadIdx.x % kWarpgroupThreads == 0 && tile_row0 < 2 * kRowsPerConsumer)
    timeline::stamp(index, 1 + 3 * (tile_row0 / kRowsPerConsumer));
  if constexpr (kStagedOutput) {
    uint8_t* staging =
        smem.fused_stage[item_count % Tile::kOutputStagingSlots] + tile_row0 * kHeadDim * 2;
    if constexpr (Tile::kOutputStagingSlots == 1) __syncwarp();  // the warp's previous copy read
    write_outputs_staged<kHeadDim, Tile::kOutRegisters>(
        p, w, acc, state, row_local, lane, tile_row0, rows.thread_row0 - tile_row0, staging);
  } else {
    write_outputs<Tile::kOutRegisters>(p, w, acc, state, row_local, lane);
  }
}

// kFusedQuantize: the fused kernel's register split (the producer quantizes; forward_config.h).
// kWindowed: the kernel for a sliding window, whose items may need per-row key ranges.
// Storage::Tile::kStaticScales: scale mode kStatic's tile (run_work_item).
template <int kHeadDim, bool kDebugProbabilities, bool kFusedQuantize, bool kWindowed,
          typename Storage>
__device__ __forceinline__ void run_consumer(const ForwardParams& p, Storage& smem, int consumer) {
  using Tile = typename Storage::Tile;
  hopper::warpgroup_registers_increase<kFusedQuantize ? Tile::kFusedConsumerRegisters
                                       : Tile::kStaticScales && !kWindowed
                                           ? Tile::kStaticConsumerRegisters
                                           : Tile::kConsumerRegisters>();
  const int thread = threadIdx.x % kWarpgroupThreads;
  const int warp = thread / 32;
  const int lane = thread % 32;
  const int tile_row0 = consumer * kRowsPerConsumer;  // first row of this consumer in the tile
  const ConsumerRows rows{tile_row0, tile_row0 + 16 * warp + lane / 4, lane};

  int iteration = 0;
  auto run_item = [&](const WorkItem& w, int index, int item_count) {
    // Timeline probe events (timeline.h; empty in production builds), consumer c's first
    // thread: 3c item ready, 3c + 1 key tiles done, 3c + 2 outputs written (c < 2).
    const bool stamps = thread == 0 && consumer < 2;
    if (stamps) timeline::stamp(index, 3 * consumer);
    constexpr bool kStaged = !kFusedQuantize;
    if (w.geo.doc_count > 1 || (kWindowed && w.geo.causal_from == TileGeometry::kWindowed))
      run_work_item<kHeadDim, kDebugProbabilities, true, kStaged>(p, smem, w, rows, index,
                                                                  item_count, iteration);
    else
      run_work_item<kHeadDim, kDebugProbabilities, false, kStaged>(p, smem, w, rows, index,
                                                                   item_count, iteration);
    if (stamps) timeline::stamp(index, 3 * consumer + 2);
    if (stamps && consumer == 0) timeline::record_place(index, w.geo.n_tiles);
  };
  // The items: where kDynamicItems the producer hands each one's index over with its Q tile
  // (SharedStorage::handed_index), then kNoMoreItems; otherwise every thread follows the grid's
  // stride (forward_config.h).
  if constexpr (kDynamicItems<kHeadDim>) {
    for (int item_count = 0;; ++item_count) {
      const int q_buffer = item_count % Tile::kQBuffers;
      hopper::mbarrier_wait(&smem.q_full[q_buffer], (item_count / Tile::kQBuffers) & 1);
      const int index = smem.handed_index[q_buffer];
      if (index == kNoMoreItems) break;
      const WorkItem w = smem.item[q_buffer];
      run_item(w, index, item_count);
    }
  } else {
    const int items = work_item_count(p);
    int item_count = 0;
    for (int index = blockIdx.x; index < items; index += gridDim.x, ++item_count) {
      const int q_buffer = item_count % Tile::kQBuffers;
      hopper::mbarrier_wait(&smem.q_full[q_buffer], (item_count / Tile::kQBuffers) & 1);
      const WorkItem w = smem.item[q_buffer];
      run_item(w, index, item_count);
    }
  }
}

}  // namespace flamia::forward
