// The persistent loop's work items: every (document, query head, query tile) in the plan's order.
// A CTA's first item is its index; the next ones come by the grid's stride (head dim 64, the
// overlapped forward's chunks), walked by the producer and the consumers independently, or, at
// head dim 128 (kDynamicItems), from the plan's counter, which the producer reads and hands to the
// consumers with each Q tile (consumer.cuh).
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
