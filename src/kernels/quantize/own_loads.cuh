// A quantize CTA's loads into registers: each thread's 4 tokens x 16 channels of every slice
// (tile_geometry.cuh), as 16-byte vectors; and the lane reduction operators (MaxOp: both
// kernels' amax; SumOp: the general kernel's dot products).
#pragma once

#include <cstdint>

#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/quantize_job.h"
#include "kernels/quantize/tile_geometry.cuh"
#include "kernels/quantize/token_transforms.cuh"

namespace flamia::quantize {

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};

// The thread's token chunks of one tensor, in registers between their loads and their store
// into the thread's own shared-memory vectors. Loads into registers, not cp.async into shared
// memory: bench_quantize's probes of this tile move the Q job's bytes at 91% of the copy rate
// that way, and at 64% with cp.async (the rate the kernel had with it).
template <int kHeadDim>
struct OwnLoads {
  static constexpr int kVectors = TileGeometry<kHeadDim>::kSlices * kQuadTokens * kChunkVectors;
  uint4 v[kVectors];
};

// Loads the thread's token chunks of `src` (zeros for tokens past the end).
template <int kHeadDim>
__device__ __forceinline__ OwnLoads<kHeadDim> load_own_chunks(const TensorSource& src,
                                                              const QuadTokens& set,
                                                              const TileGeometry<kHeadDim>& g,
                                                              int head) {
  OwnLoads<kHeadDim> loads;
#pragma unroll
  for (int n = 0; n < TileGeometry<kHeadDim>::kSlices; ++n) {
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) {
      const bool valid = set.valid(j);
      const uint4* row = reinterpret_cast<const uint4*>(
          src.data + int64_t(valid ? set.token(j) : 0) * src.token_stride +
          int64_t(head) * src.head_stride + g.chunk(n) * kChunkChannels);
#pragma unroll
      for (int h = 0; h < kChunkVectors; ++h)
        loads.v[(n * kQuadTokens + j) * kChunkVectors + h] =
            valid ? __ldg(row + h) : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  return loads;
}

}  // namespace flamia::quantize
