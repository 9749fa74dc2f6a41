// The FP8 forward kernel: a persistent, warp-specialized CTA (one producer warpgroup, two or
// three consumer warpgroups: forward_config.h) walking the planned work items.
#pragma once

#include "kernels/forward/consumer.cuh"
#include "kernels/forward/producer.cuh"
#include "kernels/hopper/dependent_launch.cuh"

namespace flamia::forward {

template <int kHeadDim, bool kStaticScales = false>
constexpr size_t forward_shared_bytes() {
  // + alignment slack of dynamic shared memory
  return sizeof(SharedStorage<kHeadDim, kStaticScales>) + 1024;
}

// q_full: every producer thread arrives (after writing the item's rows; the TMA thread with the
// Q tile's bytes).
template <typename Storage>
__device__ __forceinline__ void init_barriers(Storage& smem) {
  using Tile = typename Storage::Tile;
  for (int b = 0; b < Tile::kQBuffers; ++b) {
    hopper::mbarrier_init(&smem.q_full[b], kWarpgroupThreads);
    hopper::mbarrier_init(&smem.q_empty[b], Tile::kConsumerThreads);
  }
  for (int s = 0; s < Tile::kStages; ++s) {
    hopper::mbarrier_init(&smem.k_full[s], kWarpgroupThreads);
    hopper::mbarrier_init(&smem.k_empty[s], Tile::kConsumerThreads);
    hopper::mbarrier_init(&smem.v_full[s], kWarpgroupThreads);
    hopper::mbarrier_init(&smem.v_empty[s], Tile::kConsumerThreads);
  }
  hopper::fence_mbarrier_init();
}

// kFusedQuantize: the producer quantizes the BF16 inputs itself (fused_quantize.cuh).
// kWindowed: the instantiation for a sliding window (params.sliding_window > 0); the others
// compile every window test away, so they are the kernels without windows, unchanged.
// kStaticScales: scale mode kStatic (params.static_key_exp set): no per-key factors in the
// consumers' softmax.
template <int kHeadDim, bool kDebugProbabilities, bool kFusedQuantize, bool kWindowed,
          bool kStaticScales = false>
__global__ void __launch_bounds__(ForwardTile<kHeadDim, kStaticScales>::kThreads, 1)
    forward_kernel(const __grid_constant__ ForwardParams params) {
  extern __shared__ uint8_t shared_raw[];
  // Align by offsetting the __shared__ array itself (not through an integer cast), so the
  // compiler keeps the shared address space and emits LDS/STS rather than generic loads.
  const uint32_t misalignment = hopper::smem_addr(shared_raw) & 1023u;
  auto& smem = *reinterpret_cast<SharedStorage<kHeadDim, kStaticScales>*>(
      shared_raw + ((1024u - misalignment) & 1023u));
  hopper::allow_dependent_launch();
  if (threadIdx.x == 0) init_barriers(smem);
  __syncthreads();
  // Launched early (forward_launch.cu): nothing in global memory is read before this.
  hopper::wait_for_prior_grids();
  if (params.device_status && *params.device_status != 0) return;
  const int warpgroup = hopper::warpgroup_index_uniform();
  if (warpgroup == 0) {
    if constexpr (kFusedQuantize)
      run_fused_producer<kHeadDim>(params, smem);
    else
      run_producer<kHeadDim, kWindowed>(params, smem);
  } else {
    run_consumer<kHeadDim, kDebugProbabilities, kFusedQuantize, kWindowed>(params, smem,
                                                                           warpgroup - 1);
  }
}

}  // namespace flamia::forward
