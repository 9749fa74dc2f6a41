// The gradient token kernel: the backward's dO job (dÔ, dO'' = dO fl(1/l), delta, the dQ
// buffer's zero rows) at head dims 64 and 128 in one read of dO kept in registers, for the
// scale modes whose dÔ exponents are per token (`exact`, `static`; gradient_token_kernel_takes).
// Per CTA (one tile of kTileTokens tokens of one head, tile_geometry.cuh's thread layout):
//  1. dO's loads stay in registers; O (for delta) goes into the thread's own shared-memory
//     vectors by cp.async, where it waits without holding registers;
//  2. the tile's documents (dO'' has 64-query tile-aligned blocks, numerics §2);
//  3. each token's amax of |dO| from packed BF16 pairs (max.bf16x2), once for both copies: dÔ's
//     exponent is that amax's, and dO'''s token amax is fl(amax |r|) (the product by |r| is
//     monotone). Tokens of blocks that straddle the tile's ends (the halo) are read for their
//     amax only, as the general kernel reads them;
//  4. each tile token's dO'' exponent from its block's amax (shared memory);
//  5. per token, one unpacking of dO for both copies: dÔ's codes (row-major, straight to global
//     memory) and delta's dot with O, then dO * r and dO'''s codes (token-major, staged).
// The general kernel's gradient instance (quantize_kernel.cuh) parks dO in shared memory, reads
// it back per copy, unpacks it three times and takes the amax per element; it stays for head
// dim 256 and `block32`. The arithmetic that sets the bytes is the same functions
// (scale_exponent, encode_chunk, scale_by_inverse_l, add_delta_dot, ...), so the bytes are equal
// (test_quantize_kernel runs every case on both kernels).
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/hopper/dependent_launch.cuh"
#include "kernels/hopper/async_copy.cuh"
#include "kernels/quantize/document_lookup.cuh"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/gradient_extras.cuh"
#include "kernels/quantize/layout_writers.cuh"
#include "kernels/quantize/own_loads.cuh"
#include "kernels/quantize/quantize_job.h"
#include "kernels/quantize/scale_blocks.cuh"
#include "kernels/quantize/tile_geometry.cuh"
#include "kernels/quantize/token_transforms.cuh"

namespace flamia::quantize {

// Whether the gradient token kernel computes what the general kernel would for `job` (host
// side): the dO job as launch_quantize_backward builds it with per-token dÔ exponents.
inline bool gradient_token_kernel_takes(const TensorJob& job) {
  if (job.num_copies != 2 || job.lse_shift.out != nullptr) return false;
  const CopySpec& d_o_hat = job.copy[0];
  const CopySpec& d_o_scaled = job.copy[1];
  const bool plain_d_o_hat = d_o_hat.transform == Transform::kIdentity &&
                             d_o_hat.blocks == BlockKind::kToken && d_o_hat.row_major != nullptr &&
                             d_o_hat.token_major == nullptr;
  const bool plain_d_o_scaled = d_o_scaled.transform == Transform::kTimesInverseL &&
                                d_o_scaled.blocks == BlockKind::kTile64 &&
                                d_o_scaled.row_major == nullptr &&
                                d_o_scaled.token_major != nullptr;
  const bool extras = d_o_hat.static_exponents != nullptr || d_o_hat.amax_out != nullptr ||
                      d_o_scaled.static_exponents != nullptr || d_o_scaled.amax_out != nullptr;
  return plain_d_o_hat && plain_d_o_scaled && !extras;
}

// Registers: dO's loads (32), one token's unpacked values (16) and the 4 tokens' dO'' codes for
// the token-major transpose (16) fit 80 when the per-token scalars wait in shared memory: 3 CTAs
// per SM at head dim 128 (at 128 registers, 2 CTAs: bench_quantize's dO job 57% of the copy
// rate), 6 at 64.
constexpr int kGradientTokenRegisters = 80;

template <int kHeadDim>
struct GradientTokenShared {
  using Geometry = TileGeometry<kHeadDim>;
  static constexpr int kOwnVectors = kQuadTokens * kChunkVectors;  // one slice
  uint4 o_input[kOwnVectors][Geometry::kThreads];  // O (delta), each thread's own vectors
  alignas(16) uint8_t stage[Geometry::kStageBytes];
  uint32_t amax[kWindowTokens];  // dO'' token amax (FP32 bits), position = token - origin
  int32_t doc_begin[kTileTokens];
  int32_t doc_end[kTileTokens];
  int32_t cu_slice[kDocSliceCapacity];
  float inverse_l[kTileTokens];         // r = fl(1/l) of the tile's tokens
  int8_t d_o_exponent[kTileTokens];     // dÔ's exponents of the tile's tokens
  int8_t scaled_exponent[kTileTokens];  // dO'''s exponents of the tile's tokens
};

// cp.async of the thread's token chunks of `src` into its own vectors (zeros past the end).
template <int kHeadDim>
__device__ __forceinline__ void copy_own_chunks_async(
    const TensorSource& src, const QuadTokens& set, const TileGeometry<kHeadDim>& g, int head,
    uint4 (*vectors)[TileGeometry<kHeadDim>::kThreads], int tid) {
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    const bool valid = set.valid(j);
    const uint4* row = reinterpret_cast<const uint4*>(
        src.data + int64_t(valid ? set.token(j) : 0) * src.token_stride +
        int64_t(head) * src.head_stride + g.chunk(0) * kChunkChannels);
#pragma unroll
    for (int h = 0; h < kChunkVectors; ++h)
      hopper::async_copy_16(&vectors[j * kChunkVectors + h][tid], row + h, valid);
  }
  hopper::async_copy_commit();
}

// dO'''s amax of a token from its |dO| amax: fl(amax |r|), 0 where r = 0 (finish_amax's rule).
__device__ __forceinline__ uint32_t scaled_amax_bits(float d_o_amax, float inverse_l) {
  return amax_bits(inverse_l == 0.0f ? 0.0f : __fmul_rn(d_o_amax, fabsf(inverse_l)));
}

template <int kHeadDim>
__global__ void __launch_bounds__(TileGeometry<kHeadDim>::kThreads,
                                  ctas_per_sm_at(kGradientTokenRegisters,
                                                 TileGeometry<kHeadDim>::kThreads))
    gradient_token_kernel(const __grid_constant__ JobBatch batch) {
  hopper::allow_dependent_launch();  // the schedule plan after the pass may start beside it
  using Geometry = TileGeometry<kHeadDim>;
  static_assert(Geometry::kSlices == 1, "head dims 64 and 128: one chunk per thread");
  const TensorJob& job = batch.job[0];
  const CopySpec& d_o_hat = job.copy[0];
  const CopySpec& d_o_scaled = job.copy[1];
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  auto& s = *reinterpret_cast<GradientTokenShared<kHeadDim>*>(dynamic_smem);

  const int tid = threadIdx.x;
  const int tokens = job.tokens;
  const int tiles = (tokens + kTileTokens - 1) / kTileTokens;
  const int tile_begin = int(blockIdx.x) % tiles * kTileTokens;
  const int head = int(blockIdx.x) / tiles;
  const int tile_end = min(tile_begin + kTileTokens, tokens);
  const int tile_count = tile_end - tile_begin;
  const int window_origin = tile_begin - kMaxHaloTokens;
  const Geometry g(tid);
  const int chunk = g.chunk(0);
  const QuadTokens set{tile_begin, tokens, g.group * kPermutationGroup, g.quad, s.doc_begin};
  const bool has_delta = job.delta.out != nullptr;

  // ---- 1. loads ----------------------------------------------------------------------------
  const OwnLoads<kHeadDim> loads = load_own_chunks(job.x, set, g, head);
  if (has_delta) copy_own_chunks_async(job.delta.o, set, g, head, s.o_input, tid);
  // (read after the loads are issued, as the general kernel does)
  const bool stopped = job.device_status != nullptr && *job.device_status != kDeviceStatusOk;
  for (int i = tid; i < kWindowTokens; i += Geometry::kThreads) s.amax[i] = 0u;

  // ---- 2. documents -------------------------------------------------------------------------
  const DocumentSlice slice =
      load_document_slice(job.cu_seqlens, job.batch, tile_begin, tile_end - 1, s.cu_slice);
  store_tile_documents<Geometry::kThreads, false>(slice, tile_begin, tile_count, tid, s.doc_begin,
                                                  s.doc_end, nullptr);
  if (stopped) {
    if (has_delta) hopper::async_copy_wait_all();  // no copy outlives the CTA's shared memory
    return;
  }
  if (job.zero_rows.base != nullptr)
    zero_rows(job.zero_rows, head, tokens, tile_begin, tile_count, tid, Geometry::kThreads);

  // ---- 3. per-token amax: dÔ's exponents, dO'''s token amax ----------------------------------
  // (kept in shared memory, per tile token, until step 5: registers for more CTAs per SM)
  const int64_t exponent_row = int64_t(head) * tokens;
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    const float amax = Geometry::reduce_chunks(token_chunk_amax(loads, j), MaxOp());
    if (set.valid(j) && g.sub_chunk == 0) {  // one lane per token
      report_infinite_amax(job, amax_bits(amax));
      const int d_o_exponent = scale_exponent(__uint_as_float(amax_bits(amax)));
      const float inverse_l = load_inverse_l(job, head, set.token(j));
#pragma unroll
      for (int n = 0; n < kMaxExponentOutputs; ++n)
        if (d_o_hat.exponents[n] != nullptr)
          d_o_hat.exponents[n][exponent_row + set.token(j)] = int8_t(d_o_exponent);
      s.amax[set.token(j) - window_origin] = scaled_amax_bits(amax, inverse_l);
      s.inverse_l[set.local(j)] = inverse_l;
      s.d_o_exponent[set.local(j)] = int8_t(d_o_exponent);
    }
  }
  __syncthreads();

  // The window: the tile plus the outside parts of the dO'' blocks that straddle its ends (in
  // the documents of the tile's first and last tokens); the clamps bind only for invalid
  // cu_seqlens: never read outside the tensor.
  const TokenRange first =
      scale_block(BlockKind::kTile64, tile_begin, s.doc_begin[0], s.doc_end[0]);
  const TokenRange last = scale_block(BlockKind::kTile64, tile_end - 1, s.doc_begin[tile_count - 1],
                                      s.doc_end[tile_count - 1]);
  const int window_begin = max(min(tile_begin, first.begin), max(tile_begin - kMaxHaloTokens, 0));
  const int window_end = min(max(tile_end, last.end), min(tile_end + kMaxHaloTokens, tokens));

  const HaloWindow halo_window{window_begin, tile_begin, tile_end, window_end};
#pragma unroll 1
  for (int base = 0; base < halo_window.count(); base += Geometry::kTokensPerHaloPass) {
    const HaloSlot slot = halo_window.slot<kHeadDim>(base, tid);
    const float amax = Geometry::reduce_halo_lanes(
        packed_chunk_amax(slot.ok ? load_chunk(job.x, slot.t, head, slot.chunk) : zero_chunk()),
        MaxOp());
    if (slot.ok && slot.chunk == 0)
      s.amax[slot.t - window_origin] = scaled_amax_bits(amax, load_inverse_l(job, head, slot.t));
  }
  __syncthreads();

  // ---- 4. dO'''s exponents --------------------------------------------------------------------
  if (tid < tile_count) {
    TokenRange block =
        scale_block(BlockKind::kTile64, tile_begin + tid, s.doc_begin[tid], s.doc_end[tid]);
    block.begin = max(block.begin, window_begin);
    block.end = min(block.end, window_end);
    uint32_t bits = 0;
    for (int p = block.begin; p < block.end; ++p) bits = max(bits, s.amax[p - window_origin]);
    // An infinite dO'' amax: an Inf in dO, or a finite dO whose product by r overflowed, which
    // E4M3 cannot hold either (numerics §7; the general kernel reports every copy's block amax).
    report_infinite_amax(job, bits);
    const int e = scale_exponent(__uint_as_float(bits));
    s.scaled_exponent[tid] = int8_t(e);
#pragma unroll
    for (int n = 0; n < kMaxExponentOutputs; ++n)
      if (d_o_scaled.exponents[n] != nullptr)
        d_o_scaled.exponents[n][exponent_row + tile_begin + tid] = int8_t(e);
  }
  if (has_delta) hopper::async_copy_wait_all();  // this thread's own O vectors
  __syncthreads();

  // ---- 5. values ------------------------------------------------------------------------------
  const auto o = own_chunks(s.o_input, 0, tid);
  float delta[kQuadTokens] = {};
  uint32_t scaled_codes[kQuadTokens][kCodeWords];
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    float v[kChunkChannels];
    unpack_chunk(
        Bf16Chunk{{in_loop(loads.v[j * kChunkVectors]), in_loop(loads.v[j * kChunkVectors + 1])}},
        v);
    // (tokens past the end read entries nobody wrote: their codes are zeroed)
    const int local = set.local(j);
    uint32_t codes[kCodeWords];
    encode_chunk(v, exp2_int(-s.d_o_exponent[local]), codes);
    if (!set.valid(j)) {
#pragma unroll
      for (int w = 0; w < kCodeWords; ++w) codes[w] = 0u;
    } else {
      store_row_major(d_o_hat.row_major, set.token(j), job.layout_heads, head, kHeadDim, chunk,
                      codes);
    }
    if (has_delta)
      delta[j] = job.delta.from_input ? add_input_delta_dot(o, j, v, delta[j])
                                      : add_delta_dot(o, j, codes, delta[j]);
    scale_by_inverse_l(v, s.inverse_l[local]);
    encode_chunk(v, exp2_int(-s.scaled_exponent[local]), scaled_codes[j]);
    if (!set.valid(j)) {
#pragma unroll
      for (int w = 0; w < kCodeWords; ++w) scaled_codes[j][w] = 0u;
    }
  }
  stage_codes(s.stage, g, chunk, d_o_scaled.order, scaled_codes);
  flush_token_major<kHeadDim>(s.stage, d_o_scaled.token_major, head, tile_begin, tokens);

  if (has_delta) {
    // (the tokens recomputed here, not kept from step 3: 80 registers leave no room for that)
    QuadTokens out_set = set;
    out_set.tile_begin = opaque(tile_begin);
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) {
      const float sum = Geometry::reduce_chunks(delta[j], SumOp());
      if (out_set.valid(j) && g.sub_chunk == 0)
        job.delta.out[exponent_row + out_set.token(j)] =
            job.delta.from_input ? sum : __fmul_rn(exp2_int(s.d_o_exponent[out_set.local(j)]), sum);
    }
  }
}

}  // namespace flamia::quantize
