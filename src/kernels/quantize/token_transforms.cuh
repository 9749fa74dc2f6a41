// The FP32 values of a copy for a few tokens of one thread (its quad, or one halo token): the
// BF16 input through the copy's transform, and the per-token amax (with the dO/l shortcut).
//
// A token set describes the thread's tokens; its members are cheap to recompute, so nothing
// about them needs to stay in registers across the kernel's phases:
//   static constexpr int kCount;  int token(int j);  bool valid(int j);  int doc_begin(int j);
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/layout.h"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

// The thread's quad: tokens 16 group + pi(4 quad + j) of the tile.
struct QuadTokens {
  static constexpr int kCount = kQuadTokens;
  int tile_begin;
  int tokens;
  int group_slot;  // 16 * group
  int quad;
  const int32_t* doc_begin_smem;  // per tile-local token (valid when documents are needed)
  __host__ __device__ __forceinline__ int local(int j) const {
    return group_slot + permuted_token(quad * kQuadTokens + j);
  }
  __host__ __device__ __forceinline__ int token(int j) const { return tile_begin + local(j); }
  __host__ __device__ __forceinline__ bool valid(int j) const { return token(j) < tokens; }
  __device__ __forceinline__ int doc_begin(int j) const { return doc_begin_smem[local(j)]; }
};

// One token outside the tile (the halo), in the document that starts at `doc`.
struct HaloToken {
  static constexpr int kCount = 1;
  int t;
  bool ok;
  int doc;
  __device__ __forceinline__ int token(int) const { return t; }
  __device__ __forceinline__ bool valid(int) const { return ok; }
  __device__ __forceinline__ int doc_begin(int) const { return doc; }
};

// r = fl(1/l) of a token (inverse_l_factor: 0 where l = 0).
__device__ __forceinline__ float load_inverse_l(const TensorJob& job, int head, int token) {
  return inverse_l_factor(
      __ldg(job.softmax_stats + (int64_t(head) * job.tokens + token) * kSoftmaxStatsPerRow + 1));
}

template <Transform kTransform, int kHeadDim, typename Set, typename Source, typename Consume>
__device__ __forceinline__ void transform_tokens_as(const TensorJob& job, int head, int chunk,
                                                    const Set& set, const Source& x,
                                                    Consume consume) {
  constexpr int N = Set::kCount;
  float shift[kChunkChannels] = {};
  float inverse_l[N];
  if constexpr (kTransform == Transform::kSubtractVector) {
    load_vector_chunk(job.shift_vector + int64_t(head) * kHeadDim + chunk * kChunkChannels, shift);
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    inverse_l[j] = kTransform == Transform::kTimesInverseL && set.valid(j)
                       ? load_inverse_l(job, head, set.token(j))
                       : 1.0f;
  }
  [[maybe_unused]] int shift_doc = -1;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if constexpr (kTransform == Transform::kSubtractFirstKey) {
      // The tokens of a quad nearly always share their document: load its first key once.
      const int doc = set.valid(j) ? set.doc_begin(j) : shift_doc;
      if (doc != shift_doc) {
        unpack_chunk(load_chunk(job.x, doc, head, chunk), shift);
        shift_doc = doc;
      }
    }
    float v[kChunkChannels];
    unpack_chunk(x(j), v);
    apply_transform(kTransform, shift, inverse_l[j], v);
    consume(j, v);
  }
}

// consume(j, float (&v)[kChunkChannels]) for each token j, with the copy's transform applied;
// x(j) gives token j's BF16 chunk. Gradient jobs (dO) know only the identity and x * fl(1/l);
// the others all but x * fl(1/l).
template <int kHeadDim, bool kGradient, typename Set, typename Source, typename Consume>
__device__ __forceinline__ void transform_tokens(Transform transform, const TensorJob& job,
                                                 int head, int chunk, const Set& set,
                                                 const Source& x, Consume consume) {
  if constexpr (kGradient) {
    if (transform == Transform::kTimesInverseL) {
      transform_tokens_as<Transform::kTimesInverseL, kHeadDim>(job, head, chunk, set, x, consume);
    } else {
      transform_tokens_as<Transform::kIdentity, kHeadDim>(job, head, chunk, set, x, consume);
    }
  } else {
    switch (transform) {
      case Transform::kSubtractFirstKey:
        transform_tokens_as<Transform::kSubtractFirstKey, kHeadDim>(job, head, chunk, set, x,
                                                                    consume);
        break;
      case Transform::kSubtractVector:
        transform_tokens_as<Transform::kSubtractVector, kHeadDim>(job, head, chunk, set, x,
                                                                  consume);
        break;
      case Transform::kIdentity:
      default:
        transform_tokens_as<Transform::kIdentity, kHeadDim>(job, head, chunk, set, x, consume);
        break;
    }
  }
}

// Whether accumulate_amax folds the untransformed |x| for this transform (then two such copies
// of one job have the same per-lane amax).
template <bool kGradient>
__device__ __forceinline__ bool amax_of_untransformed(Transform transform) {
  return transform == Transform::kIdentity || (kGradient && transform == Transform::kTimesInverseL);
}

// The thread's part of each token's amax, folded into amax[j] (fmaxf: NaN is ignored, as the
// reference's std::max ignores it): of |x - m| for the subtract kinds, of |x| for the identity
// and for x * fl(1/l), which finish_amax multiplies after the lanes are combined.
template <int kHeadDim, bool kGradient, typename Set, typename Source>
__device__ __forceinline__ void accumulate_amax(Transform transform, const TensorJob& job, int head,
                                                int chunk, const Set& set, const Source& x,
                                                float (&amax)[Set::kCount]) {
  if (kGradient && transform == Transform::kTimesInverseL) {  // (amax_of_untransformed)
#pragma unroll
    for (int j = 0; j < Set::kCount; ++j) {
      float v[kChunkChannels];
      unpack_chunk(x(j), v);
      amax[j] = fmaxf(amax[j], chunk_amax(v));
    }
  } else {
    transform_tokens<kHeadDim, kGradient>(
        transform, job, head, chunk, set, x,
        [&](int j, const float(&v)[kChunkChannels]) { amax[j] = fmaxf(amax[j], chunk_amax(v)); });
  }
}

// A token's amax from the combined lanes. For x * r (r = fl(1/l)): the product by |r| is
// monotone and |fl(x r)| = fl(|x| |r|), so fl(amax|x| |r|) is exactly the amax of the products
// (and 0 for r = 0, whose row is all zeros).
template <bool kGradient, typename Set>
__device__ __forceinline__ float finish_amax(Transform transform, const TensorJob& job, int head,
                                             const Set& set, int j, float combined) {
  if (kGradient && transform == Transform::kTimesInverseL) {
    const float r = set.valid(j) ? load_inverse_l(job, head, set.token(j)) : 1.0f;
    return r == 0.0f ? 0.0f : __fmul_rn(combined, fabsf(r));
  }
  return combined;
}

}  // namespace flamia::quantize
