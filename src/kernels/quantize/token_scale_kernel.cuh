// The token-scale kernel: the quantize pass's common case in one read and no shared-memory round
// trip, at head dims 64 and 128 (256 stays on the general kernel). It takes the jobs with one
// copy that quantizes x itself (no transform) with BlockKind::kToken exponents: each token's own
// (`exact`) or its head's static one (`static`), without the LSE shift, documents or the
// gradient's extras (token_scale_kernel_takes): the forward's Q, K and V without key smoothing,
// and the Q and V jobs of a training forward (one copy each, in one or both layouts). Per
// thread, as the general kernel's geometry (tile_geometry.cuh: 4 tokens x 16 channels of one
// head):
//  1. the loads stay in registers;
//  2. each token's amax from the packed BF16 pairs (max.bf16x2 of |x|: 1 instruction per pair,
//     NaN ignored as fmaxf ignores it), combined over the warp's lanes of the token;
//  3. the exponent (scale_exponent, or the static one) and the values q8(x * 2^-e) from the
//     same registers, token by token (each token's loads die with its codes): row-major stored
//     straight away, token-major staged and written out as the general kernel does
//     (layout_writers.cuh).
// The general kernel (quantize_kernel.cuh) parks its loads in shared memory and reads them back
// for the amax and again for the values, with the copies' transforms, block kinds and extras
// decided at run time: ~16 thread instructions per element (ncu, session 32), issue-bound. The
// arithmetic that sets the bytes is the same functions (unpack_chunk, encode_chunk,
// scale_exponent, static_scale_exponent, amax_bits), so the bytes are equal (test_quantize_kernel).
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/hopper/dependent_launch.cuh"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/layout_writers.cuh"
#include "kernels/quantize/own_loads.cuh"
#include "kernels/quantize/quantize_job.h"
#include "kernels/quantize/scale_blocks.cuh"
#include "kernels/quantize/tile_geometry.cuh"
#include "kernels/quantize/token_transforms.cuh"

namespace flamia::quantize {

// Head dims the register kernels (token-scale, gradient token) are built for (their loads fit
// their registers).
__host__ __device__ constexpr bool register_kernel_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

// Whether the token-scale kernel computes what the general kernel would for `job` (host side).
inline bool token_scale_kernel_takes(const TensorJob& job) {
  if (job.num_copies != 1 || job.lse_shift.out != nullptr || job.delta.out != nullptr ||
      job.zero_rows.base != nullptr)
    return false;
  return job.copy[0].transform == Transform::kIdentity && job.copy[0].blocks == BlockKind::kToken;
}

// Registers: the tile's loads (32), one token's unpacked values (16) and the 4 tokens' codes
// for the token-major transpose (16) live together with the addresses: 80, 3 CTAs per SM at
// head dim 128 and 6 at 64 (session 32's loop over copies kept every load live across it: 128
// registers, 2 CTAs per SM, and spills at 96).
constexpr int kTokenScaleRegisters = 80;

// Shared memory: the token-major staging tile only.
template <int kHeadDim>
struct TokenScaleShared {
  alignas(16) uint8_t stage[TileGeometry<kHeadDim>::kStageBytes];
};

// One CTA's tile of `job` (CTA `cta` of the job), staging its token-major codes in `stage`
// (kStageBytes): the token-scale kernel's body, which the general kernel also runs for the jobs
// of a mixed launch that the token-scale kernel takes (TensorJob::token_scale_path).
template <int kHeadDim>
__device__ __forceinline__ void token_scale_tile(const TensorJob& job, int cta, uint8_t* stage) {
  using Geometry = TileGeometry<kHeadDim>;
  const int tiles = (job.tokens + kTileTokens - 1) / kTileTokens;
  const int tile_begin = cta % tiles * kTileTokens;
  const int head = cta / tiles;
  const int tokens = job.tokens;
  const int tid = threadIdx.x;
  const Geometry g(tid);
  const QuadTokens set{tile_begin, tokens, g.group * kPermutationGroup, g.quad, nullptr};

  // ---- 1. loads ----------------------------------------------------------------------------
  const OwnLoads<kHeadDim> loads = load_own_chunks(job.x, set, g, head);
  // (read after the loads are issued, as the general kernel does)
  if (job.device_status != nullptr && *job.device_status != kDeviceStatusOk) return;

  // ---- 2. per-token amax -------------------------------------------------------------------
  float amax[kQuadTokens];
  uint32_t largest_bits = 0u;  // of the thread's valid tokens: an Inf is recorded at the end
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    amax[j] = Geometry::reduce_chunks(token_chunk_amax(loads, j), MaxOp());
    largest_bits = max(largest_bits, set.valid(j) ? amax_bits(amax[j]) : 0u);
  }
  // (a predicate, not the bits, lives across steps 3-4: the loads hold the registers there)
  const bool infinite = is_infinite_amax(largest_bits);

  const int64_t exponent_row = int64_t(head) * tokens;
  const CopySpec& copy = job.copy[0];
  // ---- 3. exponents, amax output -----------------------------------------------------------
  // (read once: the exponent stores below might alias it for all the compiler knows)
  const bool static_scale = copy.static_exponents != nullptr;
  const int head_exponent = static_scale ? static_scale_exponent(copy.static_exponents[head]) : 0;
  int exponent[kQuadTokens];
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    exponent[j] =
        static_scale ? head_exponent : scale_exponent(__uint_as_float(amax_bits(amax[j])));
    if (set.valid(j) && g.sub_chunk == 0) {  // one lane per token writes its exponents
#pragma unroll
      for (int n = 0; n < kMaxExponentOutputs; ++n)
        if (copy.exponents[n] != nullptr)
          copy.exponents[n][exponent_row + set.token(j)] = int8_t(exponent[j]);
    }
  }
  if (copy.amax_out != nullptr) {
    uint32_t bits = 0u;
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) bits = max(bits, set.valid(j) ? amax_bits(amax[j]) : 0u);
    add_warp_amax(bits, copy.amax_out + head);
  }
  // ---- 4. values ---------------------------------------------------------------------------
#pragma unroll
  for (int n = 0; n < Geometry::kSlices; ++n) {
    const int chunk = g.chunk(n);
    uint32_t codes[kQuadTokens][kCodeWords];
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) {
      float v[kChunkChannels];
      unpack_chunk(Bf16Chunk{{in_loop(loads.v[(n * kQuadTokens + j) * kChunkVectors]),
                              in_loop(loads.v[(n * kQuadTokens + j) * kChunkVectors + 1])}},
                   v);
      encode_chunk(v, exp2_int(-exponent[j]), codes[j]);
      if (!set.valid(j)) {
#pragma unroll
        for (int w = 0; w < kCodeWords; ++w) codes[j][w] = 0u;
      } else if (copy.row_major != nullptr) {
        store_row_major(copy.row_major, set.token(j), job.layout_heads, head, kHeadDim, chunk,
                        codes[j]);
      }
    }
    if (copy.token_major != nullptr) stage_codes(stage, g, chunk, copy.order, codes);
  }
  if (copy.token_major != nullptr)
    flush_token_major<kHeadDim>(stage, copy.token_major, head, tile_begin, tokens);
  if (infinite) record_infinite_input(job);
}

template <int kHeadDim>
__global__ void __launch_bounds__(TileGeometry<kHeadDim>::kThreads,
                                  ctas_per_sm_at(kTokenScaleRegisters,
                                                 TileGeometry<kHeadDim>::kThreads))
    token_scale_kernel(const __grid_constant__ JobBatch batch) {
  hopper::allow_dependent_launch();  // the schedule plan after the pass may start beside it
  int job_index = 0;
  while (job_index + 1 < batch.count && int(blockIdx.x) >= batch.cta_begin[job_index + 1])
    ++job_index;
  __shared__ TokenScaleShared<kHeadDim> s;
  token_scale_tile<kHeadDim>(batch.job[job_index], int(blockIdx.x) - batch.cta_begin[job_index],
                             s.stage);
}

}  // namespace flamia::quantize
