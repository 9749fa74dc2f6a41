#include "kernels/forward/scheduler.h"

namespace flamia::forward {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kBinsPerThread = kScheduleCostBins / kPlanThreads;

__device__ int tile_cost(int doc, int m_block, const int32_t* cu_q, const int32_t* cu_k,
                         int block_m, int block_n, bool causal) {
  const int q_len = cu_q[doc + 1] - cu_q[doc];
  const int k_start = cu_k[doc];
  const int k_len = cu_k[doc + 1] - k_start;
  const int lead = k_start % kPermutationGroup;
  int n_tiles;
  if (causal) {
    const int last_row = min((m_block + 1) * block_m, q_len) - 1;
    n_tiles = (last_row + lead) / block_n + 1;
  } else {
    n_tiles = (k_len + lead + block_n - 1) / block_n;
  }
  // One tile's worth of fixed cost (Q load, epilogue) on top of its key tiles.
  return min(n_tiles + 1, kScheduleCostBins - 1);
}

// One CTA: counting sort of all (doc, query tile) by descending cost.
__global__ void __launch_bounds__(kPlanThreads) schedule_plan_kernel(
    const int32_t* cu_q, const int32_t* cu_k, int batch, int block_m, int block_n, bool causal,
    const int32_t* device_status, int32_t* num_tiles, TileItem* tiles) {
  __shared__ int bins[kScheduleCostBins];
  __shared__ int partial[kPlanThreads];
  const int tid = threadIdx.x;
  for (int i = tid; i < kScheduleCostBins; i += kPlanThreads) bins[i] = 0;
  __syncthreads();
  const bool skip = device_status && *device_status != 0;
  if (!skip) {
    for (int doc = tid; doc < batch; doc += kPlanThreads) {
      const int blocks = (cu_q[doc + 1] - cu_q[doc] + block_m - 1) / block_m;
      for (int m = 0; m < blocks; ++m)
        atomicAdd(&bins[tile_cost(doc, m, cu_q, cu_k, block_m, block_n, causal)], 1);
    }
  }
  __syncthreads();
  // Exclusive scan in descending cost order: thread t owns bins in reversed order
  // [t*B, (t+1)*B) of the reversed array.
  int local[kBinsPerThread];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kBinsPerThread; ++i) {
    local[i] = bins[kScheduleCostBins - 1 - (tid * kBinsPerThread + i)];
    sum += local[i];
  }
  partial[tid] = sum;
  __syncthreads();
  for (int offset = 1; offset < kPlanThreads; offset *= 2) {
    const int add = tid >= offset ? partial[tid - offset] : 0;
    __syncthreads();
    partial[tid] += add;
    __syncthreads();
  }
  int running = partial[tid] - sum;  // exclusive prefix
#pragma unroll
  for (int i = 0; i < kBinsPerThread; ++i) {
    bins[kScheduleCostBins - 1 - (tid * kBinsPerThread + i)] = running;
    running += local[i];
  }
  if (tid == kPlanThreads - 1) *num_tiles = partial[tid];
  __syncthreads();
  if (skip) return;
  for (int doc = tid; doc < batch; doc += kPlanThreads) {
    const int blocks = (cu_q[doc + 1] - cu_q[doc] + block_m - 1) / block_m;
    for (int m = 0; m < blocks; ++m) {
      const int at = atomicAdd(&bins[tile_cost(doc, m, cu_q, cu_k, block_m, block_n, causal)], 1);
      tiles[at] = TileItem{doc, m};
    }
  }
}

}  // namespace

size_t schedule_workspace_bytes(const PackedShape& shape, int block_m) {
  return align_up(kScheduleHeaderInts * sizeof(int32_t) +
                  size_t(max_query_tiles(shape, block_m)) * sizeof(TileItem));
}

ScheduleView schedule_view(void* workspace) {
  auto* base = static_cast<int32_t*>(workspace);
  return {base, reinterpret_cast<TileItem*>(base + kScheduleHeaderInts)};
}

cudaError_t launch_schedule_plan(const PackedShape& shape, int block_m, int block_n,
                                 const int32_t* device_status, void* workspace,
                                 cudaStream_t stream) {
  const ScheduleView view = schedule_view(workspace);
  schedule_plan_kernel<<<1, kPlanThreads, 0, stream>>>(
      shape.cu_seqlens_q, shape.cu_seqlens_k, shape.batch, block_m, block_n, shape.causal,
      device_status, view.num_tiles, view.tiles);
  return cudaGetLastError();
}

}  // namespace flamia::forward
