// Workload-aware ordering of the forward's query tiles: a device-side plan (no host sync) that
// lists every (document, query tile) by descending cost, so persistent CTAs take the longest
// documents' tiles first and the tail stays short.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/layout.h"
#include "kernels/forward/tile_geometry.cuh"

namespace flamia::forward {

// Workspace: a header (the number of tiles), then the tile list.
struct ScheduleView {
  int32_t* num_tiles;
  TileItem* tiles;
};

constexpr int kScheduleHeaderInts = 64;  // keeps the tile list 256-byte aligned
constexpr int kScheduleCostBins = 4096;  // costs (key tiles) above this share the top bin

inline int max_query_tiles(const PackedShape& shape, int block_m) {
  return shape.total_q / block_m + shape.batch + 1;
}
size_t schedule_workspace_bytes(const PackedShape& shape, int block_m);
ScheduleView schedule_view(void* workspace);

// Fills the tile list on `stream`. Reads cu_seqlens on the device only.
cudaError_t launch_schedule_plan(const PackedShape& shape, int block_m, int block_n,
                                 const int32_t* device_status, void* workspace,
                                 cudaStream_t stream);

}  // namespace flamia::forward
