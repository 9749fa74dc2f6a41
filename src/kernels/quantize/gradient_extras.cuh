// The dO job's extras beside its two copies (numerics §5 step 3 and the dQ buffer), shared by
// the general kernel's gradient instance (quantize_kernel.cuh) and the gradient token kernel
// (gradient_token_kernel.cuh): delta's per-chunk dot products with O, in one order (channel by
// channel, then the lanes: both kernels give the same bits), and the dQ buffer's zero rows.
#pragma once

#include <cstdint>

#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/own_loads.cuh"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

// Adds v . O of token j's chunk to sum (delta from the BF16 dO, numerics §5 step 10).
template <int kThreads>
__device__ __forceinline__ float add_input_delta_dot(const OwnChunks<kThreads>& o, int j,
                                                     const float (&v)[kChunkChannels], float sum) {
  float ov[kChunkChannels];
  unpack_chunk(o(j), ov);
#pragma unroll
  for (int c = 0; c < kChunkChannels; ++c) sum = __fmaf_rn(v[c], ov[c], sum);
  return sum;
}

// Adds decode(codes) . O of token j's chunk to sum (delta, numerics §5 step 3).
template <int kThreads>
__device__ __forceinline__ float add_delta_dot(const OwnChunks<kThreads>& o, int j,
                                               const uint32_t (&codes)[kCodeWords], float sum) {
  float ov[kChunkChannels];
  unpack_chunk(o(j), ov);
#pragma unroll
  for (int w = 0; w < kCodeWords; ++w) {
    float dec[4];
    decode_word(codes[w], dec);
#pragma unroll
    for (int b = 0; b < 4; ++b) sum = __fmaf_rn(dec[b], ov[4 * w + b], sum);
  }
  return sum;
}

// The tile's rows of `spec` (one contiguous range: [head][tile_begin, + count)), as 16-byte
// zero stores; nothing waits for them.
__device__ __forceinline__ void zero_rows(const ZeroRowsSpec& spec, int head, int tokens,
                                          int tile_begin, int count, int tid, int threads) {
  constexpr int kFloatsPerStore = 4;
  auto* rows = reinterpret_cast<float4*>(spec.base +
                                         (int64_t(head) * tokens + tile_begin) * spec.row_floats);
  const int stores = count * spec.row_floats / kFloatsPerStore;
  for (int i = tid; i < stores; i += threads) rows[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

}  // namespace flamia::quantize
