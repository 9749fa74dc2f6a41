// A quantize CTA's loads into registers: each thread's 4 tokens x 16 channels of every slice
// (tile_geometry.cuh), as 16-byte vectors; the per-token amax of such loads from packed BF16
// pairs (the register kernels); the thread's own vectors in shared memory (OwnChunks: the
// general kernel's parked loads, O for delta); and the lane reduction operators (MaxOp: the
// amax; SumOp: dot products).
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

// max(a, b) per BF16 half (max.bf16x2: a NaN half yields the other operand's half).
__device__ __forceinline__ uint32_t max_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// v, as a value the compiler cannot see through: the unpacking that follows stays inside the
// copy loop instead of being hoisted out of it with all 64 unpacked values kept live (spills).
__device__ __forceinline__ uint4 in_loop(uint4 v) {
  asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
  return v;
}

constexpr uint32_t kBf16AbsPair = 0x7FFF7FFFu;

// max(m, |x|) per BF16 half over the 8 values of one 16-byte vector.
__device__ __forceinline__ uint32_t max_abs_bf16x2(uint32_t m, const uint4& v) {
  m = max_bf16x2(m, v.x & kBf16AbsPair);
  m = max_bf16x2(m, v.y & kBf16AbsPair);
  m = max_bf16x2(m, v.z & kBf16AbsPair);
  return max_bf16x2(m, v.w & kBf16AbsPair);
}

// The larger of the two BF16 halves of m (non-negative), as FP32.
__device__ __forceinline__ float bf16x2_larger_half(uint32_t m) {
  return fmaxf(__uint_as_float(m << 16), __uint_as_float(m & 0xFFFF0000u));
}

// A copy of v the compiler cannot see through: addresses derived from it inside a loop are
// recomputed there instead of being hoisted out and kept live (which spilled them).
__device__ __forceinline__ int opaque(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

// max |x| over token j's chunk of every slice, as FP32 (exact: BF16 values).
template <int kHeadDim>
__device__ __forceinline__ float token_chunk_amax(const OwnLoads<kHeadDim>& loads, int j) {
  uint32_t m = 0u;
#pragma unroll
  for (int n = 0; n < TileGeometry<kHeadDim>::kSlices; ++n) {
#pragma unroll
    for (int h = 0; h < kChunkVectors; ++h)
      m = max_abs_bf16x2(m, loads.v[(n * kQuadTokens + j) * kChunkVectors + h]);
  }
  return bf16x2_larger_half(m);
}

// max |x| over one chunk, as FP32.
__device__ __forceinline__ float packed_chunk_amax(const Bf16Chunk& c) {
  uint32_t m = 0u;
#pragma unroll
  for (int h = 0; h < kChunkVectors; ++h) m = max_abs_bf16x2(m, c.v[h]);
  return bf16x2_larger_half(m);
}

// Token j's chunk of one slice in one of the thread's own input buffers.
template <int kThreads>
struct OwnChunks {
  const uint4 (*vectors)[kThreads];  // already offset to the slice
  int tid;
  __device__ __forceinline__ Bf16Chunk operator()(int j) const {
    return {{vectors[kChunkVectors * j][tid], vectors[kChunkVectors * j + 1][tid]}};
  }
};
template <int kThreads>
__device__ __forceinline__ OwnChunks<kThreads> own_chunks(const uint4 (*vectors)[kThreads],
                                                          int slice, int tid) {
  return {vectors + slice * kQuadTokens * kChunkVectors, tid};
}
struct RegisterChunk {
  Bf16Chunk chunk;
  __device__ __forceinline__ Bf16Chunk operator()(int) const { return chunk; }
};

// Stores the loads into the thread's own vectors (only this thread reads them).
template <int kHeadDim>
__device__ __forceinline__ void park_own_chunks(const OwnLoads<kHeadDim>& loads,
                                                uint4 (*vectors)[TileGeometry<kHeadDim>::kThreads],
                                                int tid) {
#pragma unroll
  for (int i = 0; i < OwnLoads<kHeadDim>::kVectors; ++i) vectors[i][tid] = loads.v[i];
}

}  // namespace flamia::quantize
