// The quantize kernel: one CTA per (tile of kTileTokens tokens, head) of one tensor.
//
//  1. issue the tile's BF16 loads (and O's, for delta) as asynchronous copies into a per-thread
//     area of shared memory — all later steps overlap them, and no registers hold them;
//  2. documents (only when something is document-local): the cooperative search for the
//     tile's first document, a cached slice of cu_seqlens, each token's document bounds;
//  3. per copy, per-token amax of the transformed values (lane shuffles, then a shared
//     atomicMax across warps), and for blocks that straddle the tile's ends the amax of the
//     outside tokens (a read of those rows only: the halo);
//  4. per token and copy, the block's amax -> exponent (scale_exponent), written out;
//     the LSE shift of key smoothing;
//  5. per copy, values q8(x * 2^-e): row-major straight from registers, token-major through the
//     shared staging tile; delta from the dÔ codes and O.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/views.h"
#include "kernels/quantize/async_copy.cuh"
#include "kernels/quantize/document_lookup.cuh"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/layout_writers.cuh"
#include "kernels/quantize/quantize_job.h"
#include "kernels/quantize/scale_blocks.cuh"
#include "kernels/quantize/tile_geometry.cuh"
#include "kernels/quantize/token_transforms.cuh"

namespace flamia::quantize {

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};

// Shared memory of one CTA (dynamic: up to ~100 KB at head dim 256).
template <int kHeadDim, bool kWithDelta>
struct QuantizeShared {
  using Geometry = TileGeometry<kHeadDim>;
  static constexpr int kOwnVectors = kQuadTokens * kChunkVectors;  // 16-byte vectors per thread
  // Each thread's own input vectors, [vector][thread]: conflict-free, filled by cp.async.
  uint4 input[kOwnVectors][Geometry::kThreads];
  uint4 o_input[kWithDelta ? kOwnVectors : 1][Geometry::kThreads];
  alignas(16) uint8_t stage[Geometry::kStageBytes];
  uint32_t amax[kMaxCopies][kWindowTokens];  // FP32 bits, window position = token - origin
  float partial[Geometry::kParts][kTileTokens];  // per-warp sums (LSE, delta)
  int32_t doc_begin[kTileTokens];
  int32_t doc_end[kTileTokens];
  int32_t doc_index[kTileTokens];
  int32_t cu_slice[kDocSliceCapacity];
  int8_t exponent[kMaxCopies][kTileTokens];
};

// Token j's chunk of one of the thread's own input buffers.
template <int kThreads>
struct OwnChunks {
  const uint4 (*vectors)[kThreads];
  int tid;
  __device__ __forceinline__ Bf16Chunk operator()(int j) const {
    return {{vectors[kChunkVectors * j][tid], vectors[kChunkVectors * j + 1][tid]}};
  }
};
struct RegisterChunk {
  Bf16Chunk chunk;
  __device__ __forceinline__ Bf16Chunk operator()(int) const { return chunk; }
};

// Starts the copies of the thread's 4 token chunks of `src` into its own vectors (zeros for
// tokens past the end).
template <int kThreads>
__device__ __forceinline__ void load_own_chunks(const TensorSource& src,
                                                const TokenSet<kQuadTokens>& set, int head,
                                                int chunk, uint4 (*vectors)[kThreads], int tid) {
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    const uint16_t* row = set.valid[j] ? src.data + set.token[j] * src.token_stride +
                                             int64_t(head) * src.head_stride +
                                             chunk * kChunkChannels
                                       : src.data;
#pragma unroll
    for (int h = 0; h < kChunkVectors; ++h)
      async_copy_16(&vectors[kChunkVectors * j + h][tid], row + h * kBf16PerVector,
                    set.valid[j]);
  }
}

// softmax_scale * (q . m) partials of the thread's tokens -> shared partial sums.
template <int kHeadDim, bool kWithDelta>
__device__ __forceinline__ void lse_shift_partials(const TensorJob& job,
                                                   const TileGeometry<kHeadDim>& g, int head,
                                                   const TokenSet<kQuadTokens>& set,
                                                   const OwnChunks<TileGeometry<kHeadDim>::kThreads>& x,
                                                   QuantizeShared<kHeadDim, kWithDelta>& s) {
  const LseShiftSpec& spec = job.lse_shift;
  const int kv_head = head / spec.kv_group;
  float m[kChunkChannels] = {};  // kNone: m = 0, the shift is 0
  Bf16Chunk key[kQuadTokens];
  if (spec.source == KeySmoothing::kVector) {
    load_vector_chunk(spec.vector + int64_t(kv_head) * kHeadDim + g.chunk * kChunkChannels, m);
  } else if (spec.source == KeySmoothing::kFirstKey) {
    // The key document with the query's document index; an empty one has no keys: m = 0.
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) {
      key[j] = zero_chunk();
      if (set.valid[j]) {
        const int b = s.doc_index[g.token(j)];
        const int key_begin = __ldg(spec.cu_seqlens_k + b);
        const int key_end = __ldg(spec.cu_seqlens_k + b + 1);
        if (key_end > key_begin) key[j] = load_chunk(spec.keys, key_begin, kv_head, g.chunk);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    if (spec.source == KeySmoothing::kFirstKey) unpack_chunk(key[j], m);
    float q[kChunkChannels];
    unpack_chunk(x(j), q);
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kChunkChannels; ++i) dot = __fmaf_rn(q[i], m[i], dot);
    dot = TileGeometry<kHeadDim>::reduce_chunks(dot, SumOp());
    if (set.valid[j] && g.sub_chunk == 0) s.partial[g.part][g.token(j)] = dot;
  }
}

template <int kHeadDim, bool kWithDelta>
__global__ void __launch_bounds__(TileGeometry<kHeadDim>::kThreads, TileGeometry<kHeadDim>::kMinBlocksPerSm)
    quantize_tensor_kernel(const __grid_constant__ TensorJob job) {
  using Geometry = TileGeometry<kHeadDim>;
  if (job.device_status != nullptr && *job.device_status != kDeviceStatusOk) return;

  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  auto& s = *reinterpret_cast<QuantizeShared<kHeadDim, kWithDelta>*>(dynamic_smem);
  const int tid = threadIdx.x;
  const int tile_begin = int(blockIdx.x) * kTileTokens;
  const int head = blockIdx.y;
  const int tokens = job.tokens;
  const int tile_end = min(tile_begin + kTileTokens, tokens);
  const int tile_count = tile_end - tile_begin;
  const int window_origin = tile_begin - kMaxHaloTokens;
  const Geometry g(tid);

  // ---- 1. loads ----------------------------------------------------------------------------
  TokenSet<kQuadTokens> set;
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    set.token[j] = tile_begin + g.token(j);
    set.valid[j] = set.token[j] < tokens;
  }
  load_own_chunks<Geometry::kThreads>(job.x, set, head, g.chunk, s.input, tid);
  if constexpr (kWithDelta)
    load_own_chunks<Geometry::kThreads>(job.delta.o, set, head, g.chunk, s.o_input, tid);
  async_copy_commit();
  const OwnChunks<Geometry::kThreads> x{s.input, tid};
  for (int i = tid; i < kMaxCopies * kWindowTokens; i += Geometry::kThreads)
    (&s.amax[0][0])[i] = 0u;

  // ---- 2. documents -------------------------------------------------------------------------
  if (job.needs_documents) {
    const DocumentSlice slice =
        load_document_slice(job.cu_seqlens, job.batch, tile_begin, tile_end - 1, s.cu_slice);
    for (int i = tid; i < tile_count; i += Geometry::kThreads) {
      const DocumentOf doc = slice.find(tile_begin + i);
      s.doc_begin[i] = doc.begin;
      s.doc_end[i] = doc.end;
      s.doc_index[i] = doc.index;
    }
  }
  __syncthreads();

  // The window: the tile plus the outside parts of the blocks that straddle its ends (halo
  // tokens lie in the first token's or the last token's document).
  int window_begin = tile_begin, window_end = tile_end;
  if (job.needs_documents) {
    for (int k = 0; k < job.num_copies; ++k) {
      const BlockKind kind = job.copy[k].blocks;
      const TokenRange first = scale_block(kind, tile_begin, s.doc_begin[0], s.doc_end[0]);
      const TokenRange last =
          scale_block(kind, tile_end - 1, s.doc_begin[tile_count - 1], s.doc_end[tile_count - 1]);
      window_begin = min(window_begin, first.begin);
      window_end = max(window_end, last.end);
    }
    // Bounds only bind for invalid cu_seqlens: never read outside the tensor.
    window_begin = max(window_begin, max(tile_begin - kMaxHaloTokens, 0));
    window_end = min(window_end, min(tile_end + kMaxHaloTokens, tokens));
  }
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j)
    set.doc_begin[j] = job.needs_documents && set.valid[j] ? s.doc_begin[g.token(j)] : 0;

  // ---- 3. per-token amax --------------------------------------------------------------------
  async_copy_wait_all();  // the thread's own vectors (only it reads them)
  for (int k = 0; k < job.num_copies; ++k) {
    float amax[kQuadTokens];
    token_amax<kHeadDim>(job.copy[k].transform, job, head, g.chunk, set, x,
                         [](float a) { return Geometry::reduce_chunks(a, MaxOp()); }, amax);
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) {
      if (set.valid[j] && g.sub_chunk == 0)
        atomicMax(&s.amax[k][set.token[j] - window_origin], amax_bits(amax[j]));
    }
  }
  if (job.lse_shift.out != nullptr) lse_shift_partials<kHeadDim, kWithDelta>(job, g, head, set, x, s);

  // Halo: C consecutive lanes per token, one chunk each.
  const int halo_left = tile_begin - window_begin;
  const int halo_count = halo_left + (window_end - tile_end);
  for (int base = 0; base < halo_count; base += Geometry::kTokensPerHaloPass) {
    const int i = base + tid / Geometry::kChunks;
    const int chunk = tid % Geometry::kChunks;
    TokenSet<1> halo;
    halo.valid[0] = i < halo_count;
    halo.token[0] = i < halo_left ? window_begin + i : tile_end + (i - halo_left);
    halo.doc_begin[0] = s.doc_begin[i < halo_left ? 0 : tile_count - 1];
    const RegisterChunk hx{halo.valid[0] ? load_chunk(job.x, halo.token[0], head, chunk)
                                         : zero_chunk()};
    for (int k = 0; k < job.num_copies; ++k) {
      if (job.copy[k].blocks == BlockKind::kToken) continue;
      float amax[1];
      token_amax<kHeadDim>(
          job.copy[k].transform, job, head, chunk, halo, hx,
          [](float a) {
#pragma unroll
            for (int mask = 1; mask < Geometry::kChunks; mask *= 2)
              a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, mask));
            return a;
          },
          amax);
      if (halo.valid[0] && chunk == 0)
        s.amax[k][halo.token[0] - window_origin] = amax_bits(amax[0]);
    }
  }
  __syncthreads();

  // ---- 4. exponents -----------------------------------------------------------------------
  if (tid < tile_count) {
    const int t = tile_begin + tid;
    const int64_t out_index = int64_t(head) * tokens + t;
    for (int k = 0; k < job.num_copies; ++k) {
      const CopySpec& copy = job.copy[k];
      TokenRange block = {t, t + 1};
      if (copy.blocks != BlockKind::kToken)
        block = scale_block(copy.blocks, t, s.doc_begin[tid], s.doc_end[tid]);
      block.begin = max(block.begin, window_begin);
      block.end = min(block.end, window_end);
      uint32_t bits = 0;
      for (int p = block.begin; p < block.end; ++p) bits = max(bits, s.amax[k][p - window_origin]);
      const int e = scale_exponent(__uint_as_float(bits));
      s.exponent[k][tid] = int8_t(e);
#pragma unroll
      for (int n = 0; n < kMaxExponentOutputs; ++n)
        if (copy.exponents[n] != nullptr) copy.exponents[n][out_index] = int8_t(e);
    }
    if (job.lse_shift.out != nullptr) {
      float dot = s.partial[0][tid];
#pragma unroll
      for (int p = 1; p < Geometry::kParts; ++p) dot = __fadd_rn(dot, s.partial[p][tid]);
      job.lse_shift.out[out_index] = __fmul_rn(job.lse_shift.softmax_scale, dot);
    }
  }
  __syncthreads();

  // ---- 5. values ----------------------------------------------------------------------------
  for (int k = 0; k < job.num_copies; ++k) {
    const CopySpec& copy = job.copy[k];
    uint32_t codes[kQuadTokens][kCodeWords];
    transform_tokens<kHeadDim>(copy.transform, job, head, g.chunk, set, x,
                               [&](int j, const float (&v)[kChunkChannels]) {
                                 const int e = s.exponent[k][g.token(j)];
                                 encode_chunk(v, exp2_int(-e), codes[j]);
                                 if (!set.valid[j]) {
#pragma unroll
                                   for (int w = 0; w < kCodeWords; ++w) codes[j][w] = 0u;
                                 }
                               });
    if (copy.row_major != nullptr) {
#pragma unroll
      for (int j = 0; j < kQuadTokens; ++j)
        if (set.valid[j])
          store_row_major(copy.row_major, set.token[j], job.heads, head, kHeadDim, g.chunk,
                          codes[j]);
    }
    if constexpr (kWithDelta) {
      if (k == 0) {
#pragma unroll
        const OwnChunks<Geometry::kThreads> o{s.o_input, tid};
#pragma unroll
        for (int j = 0; j < kQuadTokens; ++j) {
          float ov[kChunkChannels];
          unpack_chunk(o(j), ov);
          float sum = 0.0f;
#pragma unroll
          for (int w = 0; w < kCodeWords; ++w) {
            float dec[4];
            decode_word(codes[j][w], dec);
#pragma unroll
            for (int b = 0; b < 4; ++b) sum = __fmaf_rn(dec[b], ov[4 * w + b], sum);
          }
          sum = Geometry::reduce_chunks(sum, SumOp());
          if (set.valid[j] && g.sub_chunk == 0) s.partial[g.part][g.token(j)] = sum;
        }
      }
    }
    if (copy.token_major != nullptr) {
      stage_codes(s.stage, g, copy.order, codes);
      __syncthreads();
      write_token_major<kHeadDim>(s.stage, copy.token_major, head, tile_begin,
                                  padded_tokens(tokens));
      __syncthreads();
    }
  }
  if constexpr (kWithDelta) {
    __syncthreads();
    if (tid < tile_count) {
      float sum = s.partial[0][tid];
#pragma unroll
      for (int p = 1; p < Geometry::kParts; ++p) sum = __fadd_rn(sum, s.partial[p][tid]);
      job.delta.out[int64_t(head) * tokens + tile_begin + tid] =
          __fmul_rn(exp2_int(s.exponent[0][tid]), sum);
    }
  }
}

}  // namespace flamia::quantize
