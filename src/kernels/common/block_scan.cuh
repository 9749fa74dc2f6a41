// Block-wide prefix sums for the one-CTA schedule kernels (forward scheduler.cu, backward
// backward_schedule.cu): both order work items by a counting sort over cost bins, and the sort's
// bin offsets come from one exclusive scan over the block.
#pragma once

namespace flamia {

// Block-wide exclusive scan of one value per thread over a block of kThreads threads; returns the
// thread's prefix, `total` receives the sum. `scratch` holds kThreads ints of shared memory. Every
// thread of the block must call it (it synchronises the block).
template <int kThreads>
__device__ int block_exclusive_scan(int value, int* scratch, int* total) {
  const int tid = threadIdx.x;
  scratch[tid] = value;
  __syncthreads();
  for (int offset = 1; offset < kThreads; offset *= 2) {
    const int add = tid >= offset ? scratch[tid - offset] : 0;
    __syncthreads();
    scratch[tid] += add;
    __syncthreads();
  }
  const int inclusive = scratch[tid];
  *total = scratch[kThreads - 1];
  __syncthreads();
  return inclusive - value;
}

// Turns the kBins counts in shared `bins` into their exclusive prefix sums (each bin's first slot
// in the sorted order); thread t rewrites bins [t * kBins / kThreads, (t + 1) * kBins / kThreads).
// Returns the sum of all counts. The caller synchronises before other threads read `bins`.
template <int kThreads, int kBins>
__device__ __forceinline__ int bin_counts_to_offsets(int* bins, int* scratch) {
  static_assert(kBins % kThreads == 0, "bins split evenly over threads");
  constexpr int kBinsPerThread = kBins / kThreads;
  const int tid = threadIdx.x;
  int local[kBinsPerThread];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kBinsPerThread; ++i) {
    local[i] = bins[tid * kBinsPerThread + i];
    sum += local[i];
  }
  int total = 0;
  int running = block_exclusive_scan<kThreads>(sum, scratch, &total);
#pragma unroll
  for (int i = 0; i < kBinsPerThread; ++i) {
    bins[tid * kBinsPerThread + i] = running;
    running += local[i];
  }
  return total;
}

}  // namespace flamia
