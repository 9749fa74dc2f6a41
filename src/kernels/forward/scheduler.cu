#include "kernels/forward/scheduler.h"

#include "kernels/common/block_scan.cuh"

namespace flamia::forward {
namespace {

constexpr int kPlanThreads = 1024;

__device__ __forceinline__ int query_blocks(const int32_t* cu_q, int doc, int block_m) {
  return (cu_q[doc + 1] - cu_q[doc] + block_m - 1) / block_m;
}

__device__ __forceinline__ int tile_cost(const int32_t* cu_q, int doc, int m_block, int block_m,
                                         int block_n, bool causal) {
  const int q_len = cu_q[doc + 1] - cu_q[doc];
  // key tiles visited (+1 for the fixed cost of a work item); documents have q_len == k_len
  // when causal; non-causal ones are costed by their query length as well (a lower bound)
  const int rows = causal ? min((m_block + 1) * block_m, q_len) : q_len;
  return min((rows + block_n - 1) / block_n + 1, kScheduleCostBins - 1);
}

// One CTA: counting sort of every (document, query tile) by descending cost (longest-processing-
// time-first); each tile becomes heads_q consecutive work items.
__global__ void __launch_bounds__(kPlanThreads)
    schedule_plan_kernel(const int32_t* cu_q, int batch, int heads, int block_m, int block_n,
                         bool causal, const int32_t* device_status, ScheduleView view) {
  __shared__ int bins[kScheduleCostBins];
  __shared__ int scratch[kPlanThreads];
  const int tid = threadIdx.x;
  const bool skip = device_status && *device_status != 0;
  for (int i = tid; i < kScheduleCostBins; i += kPlanThreads) bins[i] = 0;
  __syncthreads();
  if (!skip)
    for (int doc = tid; doc < batch; doc += kPlanThreads)
      for (int m = 0, blocks = query_blocks(cu_q, doc, block_m); m < blocks; ++m)
        atomicAdd(&bins[kScheduleCostBins - 1 - tile_cost(cu_q, doc, m, block_m, block_n, causal)],
                  1);
  __syncthreads();
  const int tiles = bin_counts_to_offsets<kPlanThreads, kScheduleCostBins>(bins, scratch);
  if (tid == 0) *view.num_items = tiles * heads;
  __syncthreads();
  if (skip) return;
  for (int doc = tid; doc < batch; doc += kPlanThreads)
    for (int m = 0, blocks = query_blocks(cu_q, doc, block_m); m < blocks; ++m) {
      const int bin = kScheduleCostBins - 1 - tile_cost(cu_q, doc, m, block_m, block_n, causal);
      const int at = atomicAdd(&bins[bin], 1);
      for (int h = 0; h < heads; ++h) view.items[at * heads + h] = TileItem{doc, h, m, 0};
    }
}

}  // namespace

size_t schedule_workspace_bytes(const PackedShape& shape, int block_m) {
  return align_up(kScheduleHeaderInts * sizeof(int32_t)) +
         align_up(size_t(max_work_items(shape, block_m)) * sizeof(TileItem));
}

ScheduleView schedule_view(void* workspace) {
  WorkspaceCarver carve(workspace);
  ScheduleView view;
  view.num_items = carve.take<int32_t>(kScheduleHeaderInts);
  view.items = reinterpret_cast<TileItem*>(carve.take<int4>(0));
  return view;
}

cudaError_t launch_schedule_plan(const PackedShape& shape, int block_m, int block_n,
                                 const int32_t* device_status, void* workspace,
                                 cudaStream_t stream) {
  schedule_plan_kernel<<<1, kPlanThreads, 0, stream>>>(
      shape.cu_seqlens_q, shape.batch, shape.heads_q, block_m, block_n, shape.causal, device_status,
      schedule_view(workspace));
  return cudaGetLastError();
}

}  // namespace flamia::forward
