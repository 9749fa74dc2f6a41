// The persistent loop's work items: every (document, query head, query tile) in the plan's order.
// The producer and the consumers walk the same sequence independently (static round-robin over
// CTAs), so no hand-off is needed.
#pragma once

#include "kernels/forward/forward_params.h"
#include "kernels/forward/tile_geometry.cuh"

namespace flamia::forward {

struct WorkItem {
  int head;
  int kv_head;
  TileGeometry geo;
};

// `window`: the sliding window (0 in the kernels without one, forward_kernel's kWindowed).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ WorkItem work_item(const ForwardParams& p, int index, int window = 0) {
  const TileItem tile = p.schedule.items[index];
  WorkItem w;
  w.head = tile.head;
  w.kv_head = w.head / p.group_size;
  w.geo =
      tile_geometry<kBlockM, kBlockN>(tile, p.cu_seqlens_q, p.cu_seqlens_k, p.causal != 0, window);
  return w;
}

constexpr int kNoMoreItems = -1;

__device__ __forceinline__ int work_item_count(const ForwardParams& p) {
  return *p.schedule.num_items;
}

// The index of the CTA's item after `index`: from the plan's item counter (dynamic_items), else
// by the grid's stride. Called by one producer thread when the item starts (its round trip runs
// under the item's loads).
__device__ __forceinline__ int next_work_item(const ForwardParams& p, int index) {
  return p.dynamic_items != 0 ? int(gridDim.x) + atomicAdd(p.schedule.item_counter, 1)
                              : index + int(gridDim.x);
}

}  // namespace flamia::forward
