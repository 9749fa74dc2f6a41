// Producer warpgroup: TMA loads of Q̂, K̂ and V̂ᵀ tiles into the shared-memory ring, with each Q
// tile the work item and its query rows' visible keys and exponents (write_item_rows), the
// per-key factors (2^ek, ev, 2^-ev) of each key tile and the row-sum rows after its V̂ᵀ tile.
// Keys outside the document get ev = -inf, which masks them (t = -inf, P = 0) without a
// per-element test in the consumers. run_fused_producer: the same, quantizing the tiles itself
// (fused_quantize.cuh) instead of loading them.
#pragma once

#include "kernels/common/softmax_numerics.cuh"
#include "kernels/forward/fused_quantize.cuh"
#include "kernels/forward/shared_storage.cuh"
#include "kernels/forward/work_items.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/tma.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace flamia::forward {

constexpr int kKeysPerProducerThread = 1;  // key tile / producer threads (static_assert below)

// Per-key factors of one key tile into the stage's factor records; returns the row-sum byte of
// this thread's key (key threadIdx % 128 of the tile): e4m3 2^(ev_ref - ev_j), or 0 outside the
// document or the window. ev_ref is the value exponent of the tile's first key inside the document:
// every row that sees any key of the tile sees that one (causal: it is the earliest), so the split
// between the MMA's row sum and the FP32 fallback never depends on a later key. (With a sliding
// window a row may not see it: the split then depends on an earlier key outside the row's window,
// never on a later one, and the masked keys add exact zeros either way.)
// `exponents.key(j)` / `.value(j)`: the exponents of the tile's key j (inside the document).
template <int kHeadDim, typename Exponents, typename Storage>
__device__ __forceinline__ uint8_t write_key_factors(const WorkItem& w, int key_tile_start,
                                                     const Exponents& exponents, Storage& smem,
                                                     int stage) {
  using Tile = typename Storage::Tile;
  static_assert(Tile::kBlockN == kKeysPerProducerThread * kWarpgroupThreads, "one key a thread");
  const int j = threadIdx.x % kWarpgroupThreads;
  const int key = key_tile_start + j;
  const bool inside = key >= w.geo.k_start && key < w.geo.k_start + w.geo.k_len;
  const int key_exp = inside ? exponents.key(j) : 0;
  const int value_exp = inside ? exponents.value(j) : 0;
  const int reference_key = max(key_tile_start, w.geo.k_start);  // none if k_len == 0
  const int reference_exp = reference_key < w.geo.k_start + w.geo.k_len
                                ? exponents.value(reference_key - key_tile_start)
                                : 0;
  const int relative_exp = reference_exp - value_exp;
  // A segment's rows belong to different documents: no shared reference key, so all its keys
  // take the FP32 fallback (its tiles are few and small).
  const bool in_window = w.geo.doc_count == 1 && relative_exp >= kRowSumMinExponent &&
                         relative_exp <= kRowSumMaxExponent;
  KeyColumnFactors f = key_column_factors(key_exp, value_exp);
  if (!inside) f.value_exponent = -INFINITY;
  KeyPairFactors& pair = smem.factors[stage][j / 2];
  pair.key_scale[j & 1] = f.key_scale;
  pair.value_exponent[j & 1] = f.value_exponent;
  pair.inv_value_scale[j & 1] = f.inv_value_scale;
  pair.fallback_inv_value_scale[j & 1] = inside && !in_window ? f.inv_value_scale : 0.0f;
  const uint32_t fallback_keys = __ballot_sync(0xffffffffu, inside && !in_window);
  if (j % 32 == 0) smem.row_sum_fallback[stage][j / 32] = fallback_keys;
  return inside && in_window ? e4m3_encode(exp2_int(relative_exp)) : uint8_t(0);
}

// With the Q tile of a work item (buffer `buffer`): the item and each query row's visible keys
// for the consumers (a segment's row sees its own document's keys), and, when `exponents` is
// set, each row's exponent from the quantize pass (0 past the item's rows). All producer
// threads, before they arrive on q_full.
template <int kHeadDim, typename Storage>
__device__ __forceinline__ void write_item_rows(const ForwardParams& p, const WorkItem& w,
                                                Storage& smem, int buffer, bool exponents,
                                                int window = 0) {
  using Tile = typename Storage::Tile;
  const int tid = threadIdx.x % kWarpgroupThreads;
  if (tid == 0) smem.item[buffer] = w;
  for (int row = tid; row < Tile::kBlockM; row += kWarpgroupThreads) {
    const int row_local = w.geo.q0 + row;
    smem.row_keys[buffer][row] =
        w.geo.doc_count > 1
            ? segment_row_keys(w.geo.first_doc, w.geo.doc_count, w.geo.q_start, w.geo.q_len,
                               w.geo.k_start, row_local, p.cu_seqlens_q, p.cu_seqlens_k,
                               p.causal != 0, window)
            : document_row_keys(row_local, window);
    if (exponents) {
      const bool valid = row_local < w.geo.q_len;
      smem.q_row_exp[buffer][row] =
          valid ? p.q_exp[size_t(w.head) * p.total_q + w.geo.q_start + row_local] : int8_t(0);
    }
  }
}

// The quantize pass's exponent arrays in global memory.
struct GlobalExponents {
  const ForwardParams& p;
  size_t head_row;  // the KV head's first exponent
  int key_tile_start;
  __device__ __forceinline__ int key(int j) const { return p.k_exp[head_row + key_tile_start + j]; }
  __device__ __forceinline__ int value(int j) const {
    return p.v_exp[head_row + key_tile_start + j];
  }
};

// The exponents the producer computed for a stage (fused quantization).
struct StageExponents {
  const int8_t* key_exp;
  const int8_t* value_exp;
  __device__ __forceinline__ int key(int j) const { return key_exp[j]; }
  __device__ __forceinline__ int value(int j) const { return value_exp[j]; }
};

// The kRowSumColumns rows after the V̂ᵀ tile: this thread's key byte in each (the key's permuted
// slot, the tile's 128B swizzle).
template <int kHeadDim>
__device__ __forceinline__ void write_row_sum_rows(uint8_t row_sum_byte, uint8_t* vt_tile) {
  using Tile = ForwardTile<kHeadDim>;
  static_assert(Tile::kVtSubtiles == 1 && Tile::kVtSubtileKeys == 128,
                "row-sum rows are written for one 128-key V̂ᵀ sub-tile");
  const int key = threadIdx.x % kWarpgroupThreads;
  const int slot =
      key / kPermutationGroup * kPermutationGroup + permuted_slot(key % kPermutationGroup);
#pragma unroll
  for (int r = 0; r < Tile::kRowSumColumns; ++r)
    vt_tile[hopper::swizzled_offset<128>(kHeadDim + r, slot)] = row_sum_byte;
}

// After the CTA's last item: a Q buffer holding kNoMoreItems instead of an item, which ends the
// consumers' loops (every producer thread arrives, without a Q tile).
template <typename Storage>
__device__ __forceinline__ void signal_no_more_items(Storage& smem, int item_count) {
  using Tile = typename Storage::Tile;
  const int buffer = item_count % Tile::kQBuffers;
  if (item_count >= Tile::kQBuffers)
    hopper::mbarrier_wait(&smem.q_empty[buffer], ((item_count / Tile::kQBuffers) & 1) ^ 1);
  if (threadIdx.x % kWarpgroupThreads == 0) smem.handed_index[buffer] = kNoMoreItems;
  hopper::mbarrier_arrive(&smem.q_full[buffer]);
}

// kWindowed: the sliding-window kernel's producer (the others compile the window away).
template <int kHeadDim, bool kWindowed, typename Storage>
__device__ __forceinline__ void run_producer(const ForwardParams& p, Storage& smem) {
  using Tile = typename Storage::Tile;
  hopper::warpgroup_registers_decrease<kWindowed ? Tile::kWindowedProducerRegisters
                                                 : Tile::kProducerRegisters>();
  const int window = kWindowed ? p.sliding_window : 0;
  const int tid = threadIdx.x;
  const bool issues_tma = tid == 0;
  if (issues_tma) {
    hopper::tma_prefetch_descriptor(&p.q_map);
    hopper::tma_prefetch_descriptor(&p.k_map);
    hopper::tma_prefetch_descriptor(&p.vt_map);
    hopper::tma_prefetch_descriptor(&p.vt_tail_map);
  }
  const int items = work_item_count(p);
  int iteration = 0;
  int item_count = 0;
  // With dynamic items the TMA thread takes the next index once the item's Q buffer is free, so
  // that the counter's round trip runs under the item's loads.
  for (int index = blockIdx.x; index < items; ++item_count) {
    const WorkItem w = work_item<Tile::kBlockM, Tile::kBlockN>(p, index, window);
    const int buffer = item_count % Tile::kQBuffers;
    if (item_count >= Tile::kQBuffers)
      hopper::mbarrier_wait(&smem.q_empty[buffer], ((item_count / Tile::kQBuffers) & 1) ^ 1);
    const int next_index = kDynamicItems<kHeadDim> && issues_tma ? next_work_item(p, index) : 0;
    write_item_rows<kHeadDim>(p, w, smem, buffer, true, window);
    if (kDynamicItems<kHeadDim> && issues_tma) smem.handed_index[buffer] = index;
    if (issues_tma) {
      hopper::mbarrier_arrive_expect_tx(&smem.q_full[buffer], Tile::kQTileBytes);
      hopper::tma_load_3d(smem.q[buffer], &p.q_map, &smem.q_full[buffer], 0, w.head,
                          w.geo.q_start + w.geo.q0);
    } else {
      hopper::mbarrier_arrive(&smem.q_full[buffer]);
    }
    for (int n = 0; n < w.geo.n_tiles; ++n, ++iteration) {
      const int stage = iteration % Tile::kStages;
      const uint32_t reuse_phase = ((iteration / Tile::kStages) & 1) ^ 1;
      const int key_tile_start = w.geo.k_tile_base + n * Tile::kBlockN;
      if (iteration >= Tile::kStages) hopper::mbarrier_wait(&smem.k_empty[stage], reuse_phase);
      const GlobalExponents exponents{p, size_t(w.kv_head) * p.total_k, key_tile_start};
      const uint8_t row_sum_byte =
          write_key_factors<kHeadDim>(w, key_tile_start, exponents, smem, stage);
      if (issues_tma) {
        hopper::mbarrier_arrive_expect_tx(&smem.k_full[stage], Tile::kKTileBytes);
        hopper::tma_load_3d(smem.k[stage], &p.k_map, &smem.k_full[stage], 0, w.kv_head,
                            key_tile_start);
      } else {
        hopper::mbarrier_arrive(&smem.k_full[stage]);
      }
      if (iteration >= Tile::kStages) hopper::mbarrier_wait(&smem.v_empty[stage], reuse_phase);
      write_row_sum_rows<kHeadDim>(row_sum_byte, smem.vt[stage][0]);
      hopper::fence_proxy_async_shared();  // the P̂·V̂ wgmma reads those rows
      if (issues_tma) {
        hopper::mbarrier_arrive_expect_tx(&smem.v_full[stage], Tile::kVTileBytes);
#pragma unroll
        for (int sub = 0; sub < Tile::kVtSubtiles; ++sub) {
          const bool tail =
              sub == Tile::kVtSubtiles - 1 && Tile::kVtTailKeys != Tile::kVtSubtileKeys;
          hopper::tma_load_2d(smem.vt[stage][sub], tail ? &p.vt_tail_map : &p.vt_map,
                              &smem.v_full[stage], key_tile_start + sub * Tile::kVtSubtileKeys,
                              w.kv_head * kHeadDim);
        }
      } else {
        hopper::mbarrier_arrive(&smem.v_full[stage]);
      }
    }
    // The next index, from the TMA thread to the others (two slots: a slot is rewritten only
    // after every thread passed the barrier of the item in between). The grid stride needs none.
    if (kDynamicItems<kHeadDim> && p.dynamic_items != 0) {
      if (issues_tma) smem.next_item[item_count & 1] = next_index;
      producer_sync();
      index = smem.next_item[item_count & 1];
    } else {
      index += int(gridDim.x);
    }
  }
  if constexpr (kDynamicItems<kHeadDim>) signal_no_more_items(smem, item_count);
}

// The fused producer's sequence of tiles: each work item's Q tile, then V and K of each key
// tile. The rows of the next tile are copied into the other staging slot while this one is
// quantized (stage_tile / quantize_tile).
enum class FusedTile { kQ, kV, kK };

struct FusedStep {
  int index;  // the work item
  int n;      // its key tile (kV, kK)
  FusedTile tile;
};

__device__ __forceinline__ FusedStep next_fused_step(const FusedStep& s, const WorkItem& w) {
  switch (s.tile) {
    case FusedTile::kQ:
      if (w.geo.n_tiles > 0) return {s.index, 0, FusedTile::kV};
      break;
    case FusedTile::kV:
      return {s.index, s.n, FusedTile::kK};
    case FusedTile::kK:
      if (s.n + 1 < w.geo.n_tiles) return {s.index, s.n + 1, FusedTile::kV};
      break;
  }
  return {s.index + int(gridDim.x), 0, FusedTile::kQ};
}

__device__ __forceinline__ ItemTokens item_queries(const ForwardParams& p, const WorkItem& w) {
  return {w.geo.q_start, w.geo.q_start + w.geo.q_len, p.cu_seqlens_q, w.geo.first_doc,
          w.geo.doc_count};
}
__device__ __forceinline__ ItemTokens item_keys(const ForwardParams& p, const WorkItem& w) {
  return {w.geo.k_start, w.geo.k_start + w.geo.k_len, p.cu_seqlens_k, w.geo.first_doc,
          w.geo.doc_count};
}

template <int kHeadDim>
__device__ __forceinline__ void stage_fused_step(const ForwardParams& p, const FusedStep& s,
                                                 const WorkItem& w, uint8_t* staged) {
  using Tile = ForwardTile<kHeadDim>;
  const int key_tile_start = w.geo.k_tile_base + s.n * Tile::kBlockN;
  if (s.tile == FusedTile::kQ)
    stage_tile<kHeadDim, Tile::kBlockM>(p.fused_q, w.head, w.geo.q_start + w.geo.q0,
                                        item_queries(p, w), staged);
  else
    stage_tile<kHeadDim, Tile::kBlockN>(s.tile == FusedTile::kV ? p.fused_v : p.fused_k, w.kv_head,
                                        key_tile_start, item_keys(p, w), staged);
}

// The producer of the fused forward (ForwardParams::fused_*): the same ring protocol as
// run_producer, but it quantizes each tile from the BF16 inputs itself (fused_quantize.cuh)
// instead of issuing TMA loads, so every producer thread arrives on the full barriers.
template <int kHeadDim>
__device__ __forceinline__ void run_fused_producer(const ForwardParams& p,
                                                   SharedStorage<kHeadDim>& smem) {
  using Tile = ForwardTile<kHeadDim>;
  hopper::warpgroup_registers_decrease<Tile::kFusedProducerRegisters>();
  const bool block32 = p.fused_block32 != 0;
  const int items = work_item_count(p);
  static_assert(kDynamicItems<kHeadDim>, "the consumers wait for the fused producer's last signal");
  if (int(blockIdx.x) >= items) {
    signal_no_more_items(smem, 0);
    return;
  }
  FusedStep step{int(blockIdx.x), 0, FusedTile::kQ};
  WorkItem w = work_item<Tile::kBlockM, Tile::kBlockN>(p, step.index);
  stage_fused_step<kHeadDim>(p, step, w, smem.fused_stage[0]);
  hopper::async_copy_commit();
  int iteration = 0;   // key tiles so far (the K/V ring position)
  int item_count = 0;  // work items so far (the Q buffer)
  for (int slot = 0;; slot ^= 1) {
    const FusedStep next = next_fused_step(step, w);
    const bool has_next = next.index < items;
    const WorkItem next_item = !has_next || next.index == step.index
                                   ? w
                                   : work_item<Tile::kBlockM, Tile::kBlockN>(p, next.index);
    if (has_next) stage_fused_step<kHeadDim>(p, next, next_item, smem.fused_stage[slot ^ 1]);
    hopper::async_copy_commit();
    hopper::async_copy_wait_pending<1>();  // this step's rows (this thread's parts) landed
    const uint8_t* staged = smem.fused_stage[slot];
    const int stage = iteration % Tile::kStages;
    const int key_tile_start = w.geo.k_tile_base + step.n * Tile::kBlockN;
    if (step.tile == FusedTile::kQ) {
      const int buffer = item_count % Tile::kQBuffers;
      if (item_count >= Tile::kQBuffers)
        hopper::mbarrier_wait(&smem.q_empty[buffer], ((item_count / Tile::kQBuffers) & 1) ^ 1);
      quantize_tile<kHeadDim, Tile::kBlockM, TileLayout::kRows>(
          staged, p.fused_q, w.head, w.geo.q_start + w.geo.q0, item_queries(p, w), block32,
          smem.q[buffer], smem.q_row_exp[buffer], smem.fused_amax[kAmaxOfQ],
          smem.fused_block[kAmaxOfQ], p.device_status, kDeviceStatusInfiniteQuery);
      write_item_rows<kHeadDim>(p, w, smem, buffer, false);
      if (threadIdx.x % kWarpgroupThreads == 0) smem.handed_index[buffer] = step.index;
      hopper::fence_proxy_async_shared();  // the S = Q̂K̂ᵀ wgmma reads the tile
      hopper::mbarrier_arrive(&smem.q_full[buffer]);
      ++item_count;
    } else if (step.tile == FusedTile::kV) {
      if (iteration >= Tile::kStages) {
        const uint32_t reuse_phase = ((iteration / Tile::kStages) & 1) ^ 1;
        hopper::mbarrier_wait(&smem.k_empty[stage], reuse_phase);
        hopper::mbarrier_wait(&smem.v_empty[stage], reuse_phase);
      }
      quantize_tile<kHeadDim, Tile::kBlockN, TileLayout::kColumns>(
          staged, p.fused_v, w.kv_head, key_tile_start, item_keys(p, w), block32, smem.vt[stage][0],
          smem.fused_value_exp[stage], smem.fused_amax[kAmaxOfV], smem.fused_block[kAmaxOfV],
          p.device_status, kDeviceStatusInfiniteValue);
    } else {
      quantize_tile<kHeadDim, Tile::kBlockN, TileLayout::kRows>(
          staged, p.fused_k, w.kv_head, key_tile_start, item_keys(p, w), block32, smem.k[stage],
          smem.fused_key_exp[stage], smem.fused_amax[kAmaxOfK], smem.fused_block[kAmaxOfK],
          p.device_status, kDeviceStatusInfiniteKey);
      producer_sync();  // every key's exponents are written
      const StageExponents exponents{smem.fused_key_exp[stage], smem.fused_value_exp[stage]};
      const uint8_t row_sum_byte =
          write_key_factors<kHeadDim>(w, key_tile_start, exponents, smem, stage);
      write_row_sum_rows<kHeadDim>(row_sum_byte, smem.vt[stage][0]);
      hopper::fence_proxy_async_shared();  // the wgmmas read K̂ and V̂ᵀ with its row-sum rows
      hopper::mbarrier_arrive(&smem.k_full[stage]);
      hopper::mbarrier_arrive(&smem.v_full[stage]);
      ++iteration;
    }
    if (!has_next) break;
    step = next;
    w = next_item;
  }
  hopper::async_copy_wait_all();
  signal_no_more_items(smem, item_count);
}

}  // namespace flamia::forward
