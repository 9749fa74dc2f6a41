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

__device__ __forceinline__ float load_l(const TensorJob& job, int head, int token) {
  return __ldg(job.softmax_stats + (int64_t(head) * job.tokens + token) * kSoftmaxStatsPerRow + 1);
}

template <Transform kTransform, int kHeadDim, typename Set, typename Source, typename Consume>
__device__ __forceinline__ void transform_tokens_as(const TensorJob& job, int head, int chunk,
                                                    const Set& set, const Source& x,
                                                    Consume consume) {
  constexpr int N = Set::kCount;
  float shift[kChunkChannels] = {};
  float l[N];
  if constexpr (kTransform == Transform::kSubtractVector) {
    load_vector_chunk(job.shift_vector + int64_t(head) * kHeadDim + chunk * kChunkChannels, shift);
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    l[j] = kTransform == Transform::kDivideByL && set.valid(j) ? load_l(job, head, set.token(j))
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
    apply_transform(kTransform, shift, l[j], v);
    consume(j, v);
  }
}

// consume(j, float (&v)[kChunkChannels]) for each token j, with the copy's transform applied;
// x(j) gives token j's BF16 chunk. Gradient jobs (dO) know only the identity and x / l; the
// others all but x / l (its division's slow-path call costs registers the others need).
template <int kHeadDim, bool kGradient, typename Set, typename Source, typename Consume>
__device__ __forceinline__ void transform_tokens(Transform transform, const TensorJob& job,
                                                 int head, int chunk, const Set& set,
                                                 const Source& x, Consume consume) {
  if constexpr (kGradient) {
    if (transform == Transform::kDivideByL) {
      transform_tokens_as<Transform::kDivideByL, kHeadDim>(job, head, chunk, set, x, consume);
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
  return transform == Transform::kIdentity || (kGradient && transform == Transform::kDivideByL);
}

// The thread's part of each token's amax, folded into amax[j] (fmaxf: NaN is ignored, as the
// reference's std::max ignores it): of |x - m| for the subtract kinds, of |x| for the identity
// and for x / l, which finish_amax divides after the lanes are combined.
template <int kHeadDim, bool kGradient, typename Set, typename Source>
__device__ __forceinline__ void accumulate_amax(Transform transform, const TensorJob& job, int head,
                                                int chunk, const Set& set, const Source& x,
                                                float (&amax)[Set::kCount]) {
  if (kGradient && transform == Transform::kDivideByL) {  // (amax_of_untransformed)
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

// A token's amax from the combined lanes. For x / l: division by |l| is monotone and
// |fl(x / l)| = fl(|x| / |l|), so fl(amax|x| / |l|) is exactly the amax of the quotients (and
// 0 for l = 0, whose row is all zeros).
template <bool kGradient, typename Set>
__device__ __forceinline__ float finish_amax(Transform transform, const TensorJob& job, int head,
                                             const Set& set, int j, float combined) {
  if (kGradient && transform == Transform::kDivideByL) {
    const float l = set.valid(j) ? load_l(job, head, set.token(j)) : 1.0f;
    return l == 0.0f ? 0.0f : __fdiv_rn(combined, fabsf(l));
  }
  return combined;
}

}  // namespace flamia::quantize
