#include "kernels/forward/scheduler.h"

#include "kernels/common/block_scan.cuh"
#include "kernels/forward/document_packing.h"
#include "kernels/hopper/dependent_launch.cuh"

namespace flamia::forward {
namespace {

constexpr int kPlanThreads = 1024;

__device__ __forceinline__ int tile_cost(const int32_t* cu_q, const int32_t* cu_k, int doc,
                                         int doc_count, int m_block, int block_m, int block_n,
                                         bool causal, int window) {
  // key tiles visited (+1 for the fixed cost of a work item); documents have q_len == k_len
  // when causal; non-causal ones are costed by their query length as well (a lower bound)
  const int q_len = cu_q[doc + doc_count] - cu_q[doc];
  int rows = causal ? min((m_block + 1) * block_m, q_len) : q_len;
  if (causal && window > 0) rows = min(rows, window + block_m);  // the sliding window's keys
  if (doc_count > 1) rows = cu_k[doc + doc_count] - cu_k[doc] + kPermutationGroup;  // all keys
  return min((rows + block_n - 1) / block_n + 1, kScheduleCostBins - 1);
}

// Calls visit(doc, d, m, bin) for every query tile m of every document, spread over the block:
// with few documents each gets a group of threads that split its tiles (one thread walking a
// long document's tiles and writing heads items for each made the plan 23-38 us of a call on
// 4 x 8k or longtail; the order inside a bin does not matter to the forward).
template <typename Visit>
__device__ __forceinline__ void for_each_query_tile(const int32_t* cu_q, const int32_t* cu_k,
                                                    int batch, int block_m, int block_n,
                                                    bool causal, int window, Visit&& visit) {
  const int threads_per_doc = max(1, kPlanThreads / max(batch, 1));
  const int doc_stride = kPlanThreads / threads_per_doc;
  const int lane = threadIdx.x % threads_per_doc;
  const int first_doc = threadIdx.x / threads_per_doc;
  if (first_doc >= doc_stride) return;  // threads past the last whole group
  for (int doc = first_doc; doc < batch; doc += doc_stride) {
    const DocumentItems d = document_items(cu_q, cu_k, batch, doc, block_m);
    for (int m = lane; m < d.blocks; m += threads_per_doc)
      visit(doc, d, m,
            kScheduleCostBins - 1 -
                tile_cost(cu_q, cu_k, doc, d.doc_count, m, block_m, block_n, causal, window));
  }
}

// One CTA: counting sort of every (document, query tile) by descending cost (longest-processing-
// time-first); each tile becomes heads_q consecutive work items.
__global__ void __launch_bounds__(kPlanThreads)
    schedule_plan_kernel(const int32_t* cu_q, const int32_t* cu_k, int batch, int heads,
                         int block_m, int block_n, bool causal, int window,
                         const int32_t* device_status, ScheduleView view) {
  __shared__ int bins[kScheduleCostBins];
  __shared__ int scratch[kPlanThreads];
  const int tid = threadIdx.x;
  hopper::allow_dependent_launch();
  const bool skip = device_status && *device_status != 0;
  for (int i = tid; i < kScheduleCostBins; i += kPlanThreads) bins[i] = 0;
  __syncthreads();
  if (!skip)
    for_each_query_tile(cu_q, cu_k, batch, block_m, block_n, causal, window,
                        [&](int, const DocumentItems&, int, int bin) { atomicAdd(&bins[bin], 1); });
  __syncthreads();
  const int tiles = bin_counts_to_offsets<kPlanThreads, kScheduleCostBins>(bins, scratch);
  if (tid == 0) {
    *view.num_items = tiles * heads;
    *view.item_counter = 0;
  }
  __syncthreads();
  if (!skip)
    for_each_query_tile(cu_q, cu_k, batch, block_m, block_n, causal, window,
                        [&](int doc, const DocumentItems& d, int m, int bin) {
                          const int at = atomicAdd(&bins[bin], 1);
                          for (int h = 0; h < heads; ++h)
                            view.items[at * heads + h] = TileItem{doc, h, m, d.doc_count};
                        });
  // Launched early, the plan completes only after the quantize pass before it (so the forward
  // kernel's wait covers both).
  hopper::wait_for_prior_grids();
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
  view.item_counter = view.num_items + 1;
  view.items = reinterpret_cast<TileItem*>(carve.take<int4>(0));
  return view;
}

cudaError_t launch_schedule_plan(const PackedShape& shape, int block_m, int block_n,
                                 const int32_t* device_status, void* workspace,
                                 hopper::Launch launch, cudaStream_t stream) {
  return hopper::launch_kernel(
      schedule_plan_kernel, dim3(1), dim3(kPlanThreads), 0, stream, launch, shape.cu_seqlens_q,
      shape.cu_seqlens_k, shape.batch, shape.heads_q, block_m, block_n, bool(shape.causal),
      shape.causal ? shape.sliding_window : 0, device_status, schedule_view(workspace));
}

}  // namespace flamia::forward
