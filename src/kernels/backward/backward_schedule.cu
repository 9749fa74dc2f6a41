#include "kernels/backward/backward_schedule.h"

#include "common/views.h"
#include "kernels/backward/key_tiles.h"
#include "kernels/common/block_scan.cuh"

namespace flamia::backward {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kCostBins = 4096;  // pairs visiting more query tiles share the top bin

// Bin of a pair: descending work = ascending bin index.
__device__ __forceinline__ int cost_bin(const int32_t* cu_q, const int32_t* cu_k, int doc, int tile,
                                        bool causal) {
  const KeyTileItem item = make_key_tile_item(cu_q, cu_k, doc, tile, 0);
  const int work = min(key_tile_query_tiles(item, causal), kCostBins - 1);
  return kCostBins - 1 - work;
}

// One CTA: a counting sort of the pairs by bin. Thread t owns documents t, t + kPlanThreads, ...
// and walks each one's tiles in increasing order in both passes (see the header on stability).
__global__ void __launch_bounds__(kPlanThreads)
    backward_schedule_kernel(const int32_t* cu_q, const int32_t* cu_k, int batch,
                             int key_tiles_per_doc, bool causal, const int32_t* device_status,
                             int32_t* tile_order) {
  __shared__ int bins[kCostBins];
  __shared__ int scratch[kPlanThreads];
  const int tid = threadIdx.x;
  // The backward kernel returns before reading the order when the status is bad.
  if (device_status != nullptr && *device_status != kDeviceStatusOk) return;
  for (int i = tid; i < kCostBins; i += kPlanThreads) bins[i] = 0;
  __syncthreads();
  for (int doc = tid; doc < batch; doc += kPlanThreads)
    for (int tile = 0; tile < key_tiles_per_doc; ++tile)
      atomicAdd(&bins[cost_bin(cu_q, cu_k, doc, tile, causal)], 1);
  __syncthreads();
  bin_counts_to_offsets<kPlanThreads, kCostBins>(bins, scratch);
  __syncthreads();
  for (int doc = tid; doc < batch; doc += kPlanThreads)
    for (int tile = 0; tile < key_tiles_per_doc; ++tile) {
      const int at = atomicAdd(&bins[cost_bin(cu_q, cu_k, doc, tile, causal)], 1);
      tile_order[at] = doc * key_tiles_per_doc + tile;
    }
}

}  // namespace

cudaError_t launch_backward_schedule(const PackedShape& shape, int key_tiles_per_doc,
                                     const int32_t* device_status, int32_t* tile_order,
                                     cudaStream_t stream) {
  backward_schedule_kernel<<<1, kPlanThreads, 0, stream>>>(shape.cu_seqlens_q, shape.cu_seqlens_k,
                                                           shape.batch, key_tiles_per_doc,
                                                           shape.causal, device_status, tile_order);
  return cudaGetLastError();
}

}  // namespace flamia::backward
