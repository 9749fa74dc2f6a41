// Launch order of the backward's CTAs, planned on the device from cu_seqlens (no host sync):
// every (document, key tile) pair sorted by descending work (the query tiles it visits), so
// that the longest CTAs start first and the tail of the grid is made of the shortest ones
// (longest-processing-time-first). Causal key tile n of a document visits all but its first
// ~2n query tiles; without the order, the long first tiles of the last documents started last.
//
// Only the (document, key tile) pairs with keys are placed: a document has as many slots as the
// longest one has tiles, and most are empty when documents are short. The grid launches
// key_tiles_bound() CTAs per KV head (key_tiles.h), at least as many as the pairs with keys;
// the order's entries past those pairs hold kNoKeyTile (the launch fills them before the plan),
// and their CTAs return at once.
//
// With pack_documents (the FP8 path), the documents that pack (key_tiles.h) place no pair of
// their own: each run of them places one entry, packed_run_entry(first document, length), with
// the work of one query tile. A run replaces at least one document's pair, so the bound holds.
//
// Block x of the backward grid = kv_head * slots + rank: KV-head-major, so that the CTAs that
// run at the same time share the Q̂, dÔ tiles of few heads in L2 (as the document order did).
//
// Deterministic dQ needs the key tiles of one document in increasing order: the work of a
// document's key tiles never increases with the tile index (causal visibility is monotone), and
// the plan places a document's tiles in increasing order among ties: one thread walks them in
// order (many documents), or one warp takes 32 at a time and ranks the lanes that share a bin
// in lane order (few documents). tests/gpu/test_backward_schedule.cpp checks both.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/layout.h"
#include "kernels/hopper/dependent_launch.h"

namespace flamia::backward {

constexpr int32_t kNoKeyTile = -1;  // an order entry past the pairs with keys

inline size_t tile_order_bytes(int slots) {
  return size_t(slots) * sizeof(int32_t);
}

// Fills tile_order[0, slots) on `stream`: doc * key_tiles_per_doc + tile for every pair with
// keys (and, pack_documents, a packed run's entry), by descending work, then kNoKeyTile (nothing
// when the device status is bad: the backward kernel then reads no order). kEarly only right
// after a quantize pass (hopper/dependent_launch.cuh).
cudaError_t launch_backward_schedule(const PackedShape& shape, int key_tiles_per_doc, int slots,
                                     bool pack_documents, const int32_t* device_status,
                                     int32_t* tile_order, hopper::Launch launch,
                                     cudaStream_t stream);

}  // namespace flamia::backward
