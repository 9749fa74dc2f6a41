// The FP32 values of a copy for a few tokens of one thread (its quad, or one halo token): the
// BF16 input through the copy's transform, with the per-transform operands (the document's
// first key, the shift vector, l) loaded for all tokens before any is used, so their latencies
// overlap. Also the per-token amax, with the dO/l shortcut.
#pragma once

#include <cstdint>

#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

// Where a thread's tokens are: token index, whether it exists, its document's first token.
template <int N>
struct TokenSet {
  int64_t token[N];
  bool valid[N];
  int doc_begin[N];  // only read by kSubtractFirstKey
};

template <Transform kTransform, int kHeadDim, int N, typename Source, typename Consume>
__device__ __forceinline__ void transform_tokens_as(const TensorJob& job, int head, int chunk,
                                                    const TokenSet<N>& set, const Source& x,
                                                    Consume consume) {
  float shift[kChunkChannels] = {};
  float l[N];
  [[maybe_unused]] Bf16Chunk first_key[N];
  if constexpr (kTransform == Transform::kSubtractVector) {
    load_vector_chunk(job.shift_vector + int64_t(head) * kHeadDim + chunk * kChunkChannels, shift);
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if constexpr (kTransform == Transform::kSubtractFirstKey) {
      first_key[j] = set.valid[j] ? load_chunk(job.x, set.doc_begin[j], head, chunk) : zero_chunk();
    }
    if constexpr (kTransform == Transform::kDivideByL) {
      l[j] = set.valid[j] ? __ldg(job.softmax_stats + (int64_t(head) * job.tokens + set.token[j]) * 2 + 1)
                          : 1.0f;
    } else {
      l[j] = 1.0f;
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float v[kChunkChannels];
    unpack_chunk(x(j), v);
    if constexpr (kTransform == Transform::kSubtractFirstKey) unpack_chunk(first_key[j], shift);
    apply_transform(kTransform, shift, l[j], v);
    consume(j, v);
  }
}

// consume(j, float (&v)[kChunkChannels]) for each token j, with the copy's transform applied;
// x(j) gives token j's BF16 chunk.
template <int kHeadDim, int N, typename Source, typename Consume>
__device__ __forceinline__ void transform_tokens(Transform transform, const TensorJob& job,
                                                 int head, int chunk, const TokenSet<N>& set,
                                                 const Source& x, Consume consume) {
#ifdef QONLY
  transform = Transform::QONLY;
#endif
  switch (transform) {
    case Transform::kSubtractFirstKey:
      transform_tokens_as<Transform::kSubtractFirstKey, kHeadDim>(job, head, chunk, set, x,
                                                                  consume);
      break;
    case Transform::kSubtractVector:
      transform_tokens_as<Transform::kSubtractVector, kHeadDim>(job, head, chunk, set, x,
                                                                consume);
      break;
    case Transform::kDivideByL:
      transform_tokens_as<Transform::kDivideByL, kHeadDim>(job, head, chunk, set, x, consume);
      break;
    case Transform::kIdentity:
    default:
      transform_tokens_as<Transform::kIdentity, kHeadDim>(job, head, chunk, set, x, consume);
      break;
  }
}

// Amax over all channels of each token (reduce_lanes combines the lanes holding its other
// chunks; every lane gets the result). For x / l it divides the amax of |x| once: division by
// |l| is monotone and |fl(x / l)| = fl(|x| / |l|), so that is exactly the amax of the quotients.
template <int kHeadDim, int N, typename Source, typename ReduceLanes>
__device__ __forceinline__ void token_amax(Transform transform, const TensorJob& job, int head,
                                           int chunk, const TokenSet<N>& set, const Source& x,
                                           ReduceLanes reduce_lanes, float (&amax)[N]) {
#ifdef QONLY
  transform = Transform::QONLY;
#endif
  if (transform == Transform::kDivideByL) {
    float l[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      l[j] = set.valid[j] ? __ldg(job.softmax_stats + (int64_t(head) * job.tokens + set.token[j]) * 2 + 1)
                          : 1.0f;
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float v[kChunkChannels];
      unpack_chunk(x(j), v);
      amax[j] = __fdiv_rn(reduce_lanes(chunk_amax(v)), fabsf(l[j]));
    }
  } else {
    transform_tokens<kHeadDim>(transform, job, head, chunk, set, x,
                               [&](int j, const float (&v)[kChunkChannels]) {
                                 amax[j] = reduce_lanes(chunk_amax(v));
                               });
  }
}

}  // namespace flamia::quantize
