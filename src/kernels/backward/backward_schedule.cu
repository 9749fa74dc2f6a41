#include "kernels/backward/backward_schedule.h"

#include "common/views.h"
#include "kernels/backward/key_tiles.h"
#include "kernels/backward/packed_runs.h"
#include "kernels/common/block_scan.cuh"
#include "kernels/hopper/dependent_launch.cuh"

namespace flamia::backward {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kCostBins = 4096;  // pairs visiting more query tiles share the top bin

// Bin of a pair with keys: descending work = ascending bin index. `item` without its sliding
// window (q_stop = q_end), whose work never increases with the tile index; a window caps it by a
// constant (sliding_window_query_tiles), which keeps that order (the exact windowed count can
// grow by one from a document's first tile to its second when its queries and keys start at
// different offsets within 16).
__device__ __forceinline__ int cost_bin(const KeyTileItem& item, bool causal, int window) {
  int work = key_tile_query_tiles(item, causal);
  if (causal && window > 0) work = min(work, sliding_window_query_tiles(window));
  return kCostBins - 1 - min(work, kCostBins - 1);
}

// Whether packing document `doc` starts a run, and then the run's entry and bin.
__device__ __forceinline__ bool packed_run_start(const int32_t* cu_q, const int32_t* cu_k,
                                                 int batch, int doc, bool causal, int32_t& entry,
                                                 int& bin) {
  if (!starts_packed_run(cu_q, cu_k, doc)) return false;
  const int documents = packed_run_length(cu_q, cu_k, batch, doc);
  entry = packed_run_entry(doc, documents);
  bin = cost_bin(make_packed_item(cu_q, cu_k, doc, documents, 0), causal, 0);
  return true;
}

// Visits the order entries of the document: its key tiles with keys, in increasing order (they
// come first: key0 grows with the tile index), or, pack_documents, its run's entry if it starts
// one and none if it packs otherwise. visit(entry, bin).
template <typename Visit>
__device__ __forceinline__ void for_each_entry(const int32_t* cu_q, const int32_t* cu_k, int batch,
                                               int doc, int key_tiles_per_doc, bool causal,
                                               int window, bool pack_documents, Visit&& visit) {
  if (pack_documents && document_packs(cu_q, cu_k, doc)) {
    int32_t entry;
    int bin;
    if (packed_run_start(cu_q, cu_k, batch, doc, causal, entry, bin)) visit(entry, bin);
    return;
  }
  // The document's bounds are read once (per tile, the loads came after the previous tile's
  // order store, which may alias cu_seqlens, so they were issued again every tile).
  const KeyTileItem first = make_key_tile_item(cu_q, cu_k, doc, 0, 0);
  for (int tile = 0; tile < key_tiles_per_doc; ++tile) {
    const KeyTileItem item = nth_key_tile(first, tile);
    if (key_tile_is_empty(item)) return;
    visit(doc * key_tiles_per_doc + tile, cost_bin(item, causal, window));
  }
}

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xFFFFFFFFu;
constexpr int kPlanWarps = kPlanThreads / kWarpSize;
// Up to this many documents, the plan gives each document a warp whose lanes split its key tiles
// (32 at a time, in increasing order); beyond, a thread per document (for_each_entry). One
// thread walking a long document's tiles took 18-30 us of every backward on equal-8k and
// longtail-d64-gqa.
constexpr int kMaxDocumentsForWarps = 4 * kPlanWarps;

// Warp mode: the document's entries 32 tiles at a time. Lane l holds tile base + l; `valid`
// whether it has keys (tiles past the first empty one are empty too, so the walk ends at the
// first chunk without a valid lane). A packing document's run entry (if it starts one) is lane
// 0's. place(entry, bin, valid) is called by all lanes of the warp.
template <typename Place>
__device__ __forceinline__ void for_each_entry_chunk(const int32_t* cu_q, const int32_t* cu_k,
                                                     int batch, int doc, int key_tiles_per_doc,
                                                     bool causal, int window, bool pack_documents,
                                                     Place&& place) {
  const int lane = threadIdx.x % kWarpSize;
  if (pack_documents && document_packs(cu_q, cu_k, doc)) {
    int32_t entry = 0;
    int bin = 0;
    const bool starts = lane == 0 && packed_run_start(cu_q, cu_k, batch, doc, causal, entry, bin);
    place(entry, bin, starts);
    return;
  }
  const KeyTileItem first = make_key_tile_item(cu_q, cu_k, doc, 0, 0);
  for (int base = 0; base < key_tiles_per_doc; base += kWarpSize) {
    const int tile = base + lane;
    const KeyTileItem item = nth_key_tile(first, tile);
    const bool valid = tile < key_tiles_per_doc && !key_tile_is_empty(item);
    place(doc * key_tiles_per_doc + tile, valid ? cost_bin(item, causal, window) : 0, valid);
    if (!__any_sync(kFullWarp, valid)) return;
  }
}

// Places the valid lanes' entries of one chunk: lanes that share a bin take consecutive slots in
// lane (tile) order, after every entry the warp placed in that bin before (its earlier chunks):
// a document's tiles stay in increasing order among ties, as deterministic dQ needs.
__device__ __forceinline__ void place_chunk(int* bins, int32_t* tile_order, int slots,
                                            int32_t entry, int bin, bool valid) {
  const int lane = threadIdx.x % kWarpSize;
  const unsigned active = __ballot_sync(kFullWarp, valid);
  if (!valid) return;
  const unsigned same = __match_any_sync(active, bin);
  const int leader = __ffs(same) - 1;
  int first = 0;
  if (lane == leader) first = atomicAdd(&bins[bin], __popc(same));
  first = __shfl_sync(same, first, leader);
  const int at = first + __popc(same & ((1u << lane) - 1u));
  if (at < slots) tile_order[at] = entry;  // always (the bound)
}

// One CTA: a counting sort of the pairs with keys by bin. Thread mode: thread t owns documents
// t, t + kPlanThreads, ... and walks each one's tiles in increasing order in both passes (see the
// header on stability); warp mode (few documents): warp w owns documents w, w + kPlanWarps, ...
// (place_chunk keeps the order). The entries past the pairs get kNoKeyTile.
__device__ __forceinline__ void plan_tile_order(const int32_t* cu_q, const int32_t* cu_k, int batch,
                                                int key_tiles_per_doc, int slots, bool causal,
                                                int window, bool pack_documents,
                                                int32_t* tile_order) {
  __shared__ int bins[kCostBins];
  __shared__ int scratch[kPlanThreads];
  const int tid = threadIdx.x;
  for (int i = tid; i < kCostBins; i += kPlanThreads) bins[i] = 0;
  __syncthreads();
  const bool warp_mode = batch <= kMaxDocumentsForWarps;
  auto entries = [&](int doc, auto&& visit) {
    for_each_entry(cu_q, cu_k, batch, doc, key_tiles_per_doc, causal, window, pack_documents,
                   visit);
  };
  auto chunks = [&](int doc, auto&& place) {
    for_each_entry_chunk(cu_q, cu_k, batch, doc, key_tiles_per_doc, causal, window, pack_documents,
                         place);
  };
  if (warp_mode) {
    for (int doc = tid / kWarpSize; doc < batch; doc += kPlanWarps)
      chunks(doc, [&](int32_t, int bin, bool valid) {
        if (valid) atomicAdd(&bins[bin], 1);
      });
  } else {
    for (int doc = tid; doc < batch; doc += kPlanThreads)
      entries(doc, [&](int32_t, int bin) { atomicAdd(&bins[bin], 1); });
  }
  __syncthreads();
  const int pairs = bin_counts_to_offsets<kPlanThreads, kCostBins>(bins, scratch);
  __syncthreads();
  for (int i = pairs + tid; i < slots; i += kPlanThreads) tile_order[i] = kNoKeyTile;
  if (warp_mode) {
    for (int doc = tid / kWarpSize; doc < batch; doc += kPlanWarps)
      chunks(doc, [&](int32_t entry, int bin, bool valid) {
        place_chunk(bins, tile_order, slots, entry, bin, valid);
      });
  } else {
    for (int doc = tid; doc < batch; doc += kPlanThreads)
      entries(doc, [&](int32_t entry, int bin) {
        const int at = atomicAdd(&bins[bin], 1);
        if (at < slots) tile_order[at] = entry;  // always (the bound)
      });
  }
}

// Launched early (hopper/dependent_launch.cuh), the plan runs beside the quantize pass's last
// CTAs and completes after it, so that the backward kernel's wait covers both.
__global__ void __launch_bounds__(kPlanThreads)
    backward_schedule_kernel(const int32_t* cu_q, const int32_t* cu_k, int batch,
                             int key_tiles_per_doc, int slots, bool causal, int window,
                             bool pack_documents, const int32_t* device_status,
                             int32_t* tile_order) {
  hopper::allow_dependent_launch();
  // The backward kernel returns before reading the order when the status is bad.
  if (device_status == nullptr || *device_status == kDeviceStatusOk)
    plan_tile_order(cu_q, cu_k, batch, key_tiles_per_doc, slots, causal, window, pack_documents,
                    tile_order);
  hopper::wait_for_prior_grids();
}

}  // namespace

cudaError_t launch_backward_schedule(const PackedShape& shape, int key_tiles_per_doc, int slots,
                                     bool pack_documents, const int32_t* device_status,
                                     int32_t* tile_order, hopper::Launch launch,
                                     cudaStream_t stream) {
  return hopper::launch_kernel(
      backward_schedule_kernel, dim3(1), dim3(kPlanThreads), 0, stream, launch, shape.cu_seqlens_q,
      shape.cu_seqlens_k, shape.batch, key_tiles_per_doc, slots, bool(shape.causal),
      shape.causal ? shape.sliding_window : 0, pack_documents, device_status, tile_order);
}

}  // namespace flamia::backward
