// Producer warpgroup: TMA loads of Q̂, K̂ and V̂ᵀ tiles into the shared-memory ring, and the
// per-key factors (2^ek, ev, 2^-ev) of each key tile. Keys outside the document get ev = -inf,
// which masks them (t = -inf, P = 0) without a per-element test in the consumers.
#pragma once

#include "kernels/common/softmax_numerics.cuh"
#include "kernels/forward/shared_storage.cuh"
#include "kernels/forward/work_items.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/tma.cuh"

namespace flamia::forward {

template <int kHeadDim>
__device__ __forceinline__ void run_producer(const ForwardParams& p,
                                             SharedStorage<kHeadDim>& smem) {
  using Tile = ForwardTile<kHeadDim>;
  hopper::warpgroup_registers_decrease<kProducerRegisters>();
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
  for (int index = blockIdx.x; index < items; index += gridDim.x, ++item_count) {
    const WorkItem w = work_item<Tile::kBlockN>(p, index);
    if (issues_tma) {
      const int buffer = item_count % Tile::kQBuffers;
      if (item_count >= Tile::kQBuffers)
        hopper::mbarrier_wait(&smem.q_empty[buffer], ((item_count / Tile::kQBuffers) & 1) ^ 1);
      hopper::mbarrier_arrive_expect_tx(&smem.q_full[buffer], Tile::kQTileBytes);
      hopper::tma_load_3d(smem.q[buffer], &p.q_map, &smem.q_full[buffer], 0, w.head,
                          w.geo.q_start + w.geo.q0);
    }
    for (int n = 0; n < w.geo.n_tiles; ++n, ++iteration) {
      const int stage = iteration % Tile::kStages;
      const uint32_t reuse_phase = ((iteration / Tile::kStages) & 1) ^ 1;
      const int key_tile_start = w.geo.k_tile_base + n * Tile::kBlockN;
      if (iteration >= Tile::kStages) hopper::mbarrier_wait(&smem.k_empty[stage], reuse_phase);
        // this thread's keys' factors
#pragma unroll 1
      for (int j = tid; j < Tile::kBlockN; j += kWarpgroupThreads) {
        const int key = key_tile_start + j;
        const bool inside = key >= w.geo.k_start && key < w.geo.k_start + w.geo.k_len;
        const size_t exp_index = size_t(w.kv_head) * p.total_k + (inside ? key : 0);
        const int key_exp = inside ? p.k_exp[exp_index] : 0;
        const int value_exp = inside ? p.v_exp[exp_index] : 0;
        KeyColumnFactors f = key_column_factors(key_exp, value_exp);
        if (!inside) f.value_exponent = -INFINITY;
        KeyPairFactors& pair = smem.factors[stage][j / 2];
        pair.key_scale[j & 1] = f.key_scale;
        pair.value_exponent[j & 1] = f.value_exponent;
        pair.inv_value_scale[j & 1] = f.inv_value_scale;
      }
      if (issues_tma) {
        hopper::mbarrier_arrive_expect_tx(&smem.k_full[stage], Tile::kKTileBytes);
        hopper::tma_load_3d(smem.k[stage], &p.k_map, &smem.k_full[stage], 0, w.kv_head,
                            key_tile_start);
        if (iteration >= Tile::kStages) hopper::mbarrier_wait(&smem.v_empty[stage], reuse_phase);
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
        hopper::mbarrier_arrive(&smem.k_full[stage]);
      }
    }
  }
}

}  // namespace flamia::forward
