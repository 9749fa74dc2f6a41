// Workload-aware ordering of the forward's work items, planned on the device (no host sync):
// every (document, query tile) sorted by descending cost (key tiles visited), longest first,
// each expanded into its query heads (neighbouring items share K̂/V̂ of a KV head in L2).
// Short documents are packed: consecutive documents of at most kPackedDocumentTokens tokens
// that lie inside the same query-tile-sized window share one item (document_packing.h).
// Persistent CTAs take their first item by CTA index and, at head dim 128 (kDynamicItems), each
// next one from a global counter in the order of the list (ScheduleView::item_counter), so the
// tail is made of the shortest items and no CTA runs more than about one item past the others;
// round-robin over the sorted list (head dim 64, the overlapped forward's chunks) left the CTAs
// apart by up to the longest item's time.
// (Measured: a document-major order had better L2 locality but a worse tail, 0.63 -> 0.73 ms
// on equal-2k.)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/layout.h"
#include "kernels/forward/tile_geometry.cuh"
#include "kernels/hopper/dependent_launch.h"

namespace flamia::forward {

// Workspace: a header (the number of items, the item counter), then the items.
struct ScheduleView {
  int32_t* num_items;
  int32_t* item_counter;  // zeroed by the plan; the forward kernel's CTAs take items from it
  TileItem* items;
};

constexpr int kScheduleHeaderInts = 64;  // keeps what follows 256-byte aligned
constexpr int kScheduleCostBins = 4096;  // documents with more query tiles share the top bin

inline int64_t max_work_items(const PackedShape& shape, int block_m) {
  return (int64_t(shape.total_q) / block_m + shape.batch + 1) * shape.heads_q;
}
size_t schedule_workspace_bytes(const PackedShape& shape, int block_m);
ScheduleView schedule_view(void* workspace);

// Fills the item list on `stream`. Reads cu_seqlens on the device only. kEarly only right after
// a quantize pass (hopper/dependent_launch.cuh): the plan then runs beside its last CTAs and
// completes after it.
cudaError_t launch_schedule_plan(const PackedShape& shape, int block_m, int block_n,
                                 const int32_t* device_status, void* workspace,
                                 hopper::Launch launch, cudaStream_t stream);

}  // namespace flamia::forward
