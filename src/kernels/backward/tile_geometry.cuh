// The backward CTA's work item from its block index (host/device geometry: key_tiles.h).
#pragma once

#include "kernels/backward/backward_params.h"
#include "kernels/backward/backward_schedule.h"
#include "kernels/backward/key_tiles.h"
#include "kernels/backward/packed_runs.h"

namespace flamia::backward {

// The launch order (backward_schedule.h): block x = kv_head * key_tile_slots + rank, and
// tile_order[rank] = doc * key_tiles_per_doc + tile for the pairs with keys (or a packed run's
// entry), sorted by descending work with the tiles of one document in increasing order, then
// kNoKeyTile. So the
// key tiles of one (document, KV head) have increasing block indices in increasing tile order:
// the deterministic dQ ordering waits only on lower-indexed (earlier dispatched) CTAs.
// The CTA's entry of the launch order: its index is in bounds whatever the inputs, so the kernel
// loads it before it checks the device status, and the two loads' latencies overlap.
__device__ __forceinline__ int key_tile_pair(const BackwardParams& p) {
  return p.tile_order[blockIdx.x % p.key_tile_slots];
}
// (Not for kNoKeyTile.)
// `window`: the sliding window (0 in the kernels without one, backward_kernel's kWindowed).
__device__ __forceinline__ KeyTileItem key_tile_item(const BackwardParams& p, int pair,
                                                     int window) {
  const int kv_head = blockIdx.x / p.key_tile_slots;
  if (is_packed_run_entry(pair))
    return make_packed_item(p.cu_seqlens_q, p.cu_seqlens_k, packed_run_first_doc(pair),
                            packed_run_documents(pair), kv_head);
  return with_sliding_window(
      make_key_tile_item(p.cu_seqlens_q, p.cu_seqlens_k, pair / p.key_tiles_per_doc,
                         pair % p.key_tiles_per_doc, kv_head),
      p.causal != 0, window);
}

}  // namespace flamia::backward
