// The quantize kernel: one CTA per (tile of kTileTokens tokens, head) of one tensor (of the
// launch's JobBatch).
//
//  1. load the tile's BF16 values (and O's, for delta) into registers and store them into a
//     per-thread area of shared memory, where they wait for the later steps;
//  2. documents (only when something is document-local): the cooperative search for the
//     tile's first document, a cached slice of cu_seqlens, each token's document bounds;
//  3. per copy, per-token amax of the transformed values (lane shuffles within the warp that
//     holds the token), and for blocks that straddle the tile's ends the amax of the
//     outside tokens (a read of those rows only: the halo); the LSE shift's partial dots;
//  4. per token and copy, the block's amax -> exponent (scale_exponent), written out;
//     the LSE shift;
//  5. per copy, values q8(x * 2^-e): row-major straight from registers, token-major through the
//     shared staging tile; delta from the dÔ codes and O.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/hopper/dependent_launch.cuh"
#include "common/views.h"
#include "kernels/quantize/document_lookup.cuh"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/gradient_extras.cuh"
#include "kernels/quantize/layout_writers.cuh"
#include "kernels/quantize/own_loads.cuh"
#include "kernels/quantize/quantize_job.h"
#include "kernels/quantize/scale_blocks.cuh"
#include "kernels/quantize/tile_geometry.cuh"
#include "kernels/quantize/token_scale_kernel.cuh"
#include "kernels/quantize/token_transforms.cuh"

namespace flamia::quantize {

// kGradient: the dO job (dÔ, dO/l, delta), which also stages O. Others: Q, K, V.
//
// Register budgets (per thread, checked spill-free with -Xptxas -v): a thread holds its tile
// loads (8 16-byte vectors per slice, 16 for O and dO) in registers until they are stored to
// shared memory. Shared memory bounds the CTAs per SM at head dims 256 (2, or 1 with O) and
// 128 with O (2); at 128 the budget of 80 gives 3 CTAs per SM (at 64 registers, 4, ptxas
// spilled a token index held across the kernel), at 64 it gives 6.
template <int kHeadDim, bool kGradient>
constexpr int min_blocks_per_sm() {
  constexpr int kBudget = kHeadDim == 256 ? (kGradient ? 255 : 128) : (kGradient ? 128 : 80);
  return ctas_per_sm_at(kBudget, TileGeometry<kHeadDim>::kThreads);
}

// Shared memory of one CTA (dynamic: 53 KB at head dim 128, 101 KB at 256; the gradient
// kernel adds O's tile).
template <int kHeadDim, bool kGradient>
struct QuantizeShared {
  using Geometry = TileGeometry<kHeadDim>;
  // 16-byte vectors per thread: 4 tokens x slices x 2.
  static constexpr int kOwnVectors = kQuadTokens * Geometry::kSlices * kChunkVectors;
  // Each thread's own input vectors, [vector][thread]: conflict-free, filled by cp.async.
  uint4 input[kOwnVectors][Geometry::kThreads];
  uint4 o_input[kGradient ? kOwnVectors : 1][kGradient ? Geometry::kThreads : 1];  // O (delta)
  alignas(16) uint8_t stage[Geometry::kStageBytes];
  uint32_t amax[kMaxCopies][kWindowTokens];  // FP32 bits, window position = token - origin
  float partial[kTileTokens];                // per-token sums (LSE shift, delta)
  int32_t doc_begin[kTileTokens];
  int32_t doc_end[kTileTokens];
  int32_t doc_index[kTileTokens];
  int32_t cu_slice[kDocSliceCapacity];
  int8_t exponent[kMaxCopies][kTileTokens];
};

// Dots q . m of the thread's tokens (m per §4.1) -> shared per-token sums.
template <int kHeadDim, bool kGradient>
__device__ __forceinline__ void lse_shift_dots(const TensorJob& job,
                                               const TileGeometry<kHeadDim>& g, int head,
                                               const QuadTokens& set,
                                               QuantizeShared<kHeadDim, kGradient>& s) {
  const LseShiftSpec& spec = job.lse_shift;
  const int kv_head = head / spec.kv_group;
  float dot[kQuadTokens] = {};
#pragma unroll 1
  for (int n = 0; n < TileGeometry<kHeadDim>::kSlices; ++n) {
    const int chunk = g.chunk(n);
    const auto x = own_chunks(s.input, n, int(threadIdx.x));
    float m[kChunkChannels] = {};  // kNone: m = 0, the shift is 0
    if (spec.source == KeySmoothing::kVector)
      load_vector_chunk(spec.vector + int64_t(kv_head) * kHeadDim + chunk * kChunkChannels, m);
    int m_doc = -1;
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) {
      if (spec.source == KeySmoothing::kFirstKey && set.valid(j)) {
        // The key document with the query's document index (an empty one: m = 0, unused).
        const int b = s.doc_index[set.local(j)];
        if (b != m_doc) {
          const int key_begin = __ldg(spec.cu_seqlens_k + b);
          const int key_end = __ldg(spec.cu_seqlens_k + b + 1);
          unpack_chunk(
              key_end > key_begin ? load_chunk(spec.keys, key_begin, kv_head, chunk) : zero_chunk(),
              m);
          m_doc = b;
        }
      }
      float q[kChunkChannels];
      unpack_chunk(x(j), q);
#pragma unroll
      for (int i = 0; i < kChunkChannels; ++i) dot[j] = __fmaf_rn(q[i], m[i], dot[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < kQuadTokens; ++j) {
    const float sum = TileGeometry<kHeadDim>::reduce_chunks(dot[j], SumOp());
    if (set.valid(j) && g.sub_chunk == 0) s.partial[set.local(j)] = sum;
  }
}

// softmax_scale * (q . m) of tile token `local`; 0 when its key document is empty (the query
// sees no key, its LSE is -inf), as in the reference.
template <int kHeadDim, bool kGradient>
__device__ __forceinline__ float lse_shift_value(const TensorJob& job, int local,
                                                 const QuantizeShared<kHeadDim, kGradient>& s) {
  const LseShiftSpec& spec = job.lse_shift;
  if (spec.source == KeySmoothing::kNone) return 0.0f;
  const int b = s.doc_index[local];
  const bool has_keys = __ldg(spec.cu_seqlens_k + b + 1) > __ldg(spec.cu_seqlens_k + b);
  return has_keys ? __fmul_rn(spec.softmax_scale, s.partial[local]) : 0.0f;
}

template <int kHeadDim, bool kGradient>
__global__ void __launch_bounds__(TileGeometry<kHeadDim>::kThreads,
                                  min_blocks_per_sm<kHeadDim, kGradient>())
    quantize_tensor_kernel(const __grid_constant__ JobBatch batch) {
  hopper::allow_dependent_launch();  // the schedule plan after the pass may start beside it
  using Geometry = TileGeometry<kHeadDim>;
  // The gradient kernel serves one job per launch (dO): its fields keep constant offsets.
  int job_index = 0;
  if constexpr (!kGradient) {
    while (job_index + 1 < batch.count && int(blockIdx.x) >= batch.cta_begin[job_index + 1])
      ++job_index;
  }
  const TensorJob& job = batch.job[job_index];
  const int cta = int(blockIdx.x) - batch.cta_begin[job_index];
  const int tiles = (job.tokens + kTileTokens - 1) / kTileTokens;

  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  auto& s = *reinterpret_cast<QuantizeShared<kHeadDim, kGradient>*>(dynamic_smem);
  // A mixed launch's jobs for the token-scale kernel run its body (uniform per CTA).
  if constexpr (!kGradient && register_kernel_head_dim(kHeadDim)) {
    if (job.token_scale_path) {
      token_scale_tile<kHeadDim>(job, cta, s.stage);
      return;
    }
  }
  const int tid = threadIdx.x;
  const int tile_begin = cta % tiles * kTileTokens;
  const int head = cta / tiles;
  const int tokens = job.tokens;
  const int tile_end = min(tile_begin + kTileTokens, tokens);
  const int tile_count = tile_end - tile_begin;
  const int window_origin = tile_begin - kMaxHaloTokens;
  const Geometry g(tid);
  const QuadTokens set{tile_begin, tokens, g.group * kPermutationGroup, g.quad, s.doc_begin};

  // ---- 1. loads ----------------------------------------------------------------------------
  const OwnLoads<kHeadDim> x_loads = load_own_chunks(job.x, set, g, head);
  [[maybe_unused]] OwnLoads<kHeadDim> o_loads;  // O (delta)
  if constexpr (kGradient) {
    if (job.delta.out != nullptr) o_loads = load_own_chunks(job.delta.o, set, g, head);
  }
  // A failed check earlier in this call (device_status) stops the kernel. It is read after the
  // tile's loads are issued, so that its round trip overlaps theirs (measured neutral in
  // session 13). Every address above lies inside the tensors whatever cu_seqlens holds.
  const bool stopped = job.device_status != nullptr && *job.device_status != kDeviceStatusOk;
  for (int i = tid; i < kMaxCopies * kWindowTokens; i += Geometry::kThreads)
    (&s.amax[0][0])[i] = 0u;

  // ---- 2. documents -------------------------------------------------------------------------
  if (job.needs_documents) {
    const DocumentSlice slice =
        load_document_slice(job.cu_seqlens, job.batch, tile_begin, tile_end - 1, s.cu_slice);
    store_tile_documents<Geometry::kThreads, true>(slice, tile_begin, tile_count, tid, s.doc_begin,
                                                   s.doc_end, s.doc_index);
  }
  // The loads are stored after the document lookup, whose own loads then overlap them.
  park_own_chunks(x_loads, s.input, tid);
  if constexpr (kGradient) {
    if (job.delta.out != nullptr) park_own_chunks(o_loads, s.o_input, tid);
  }
  if (stopped) return;
  if constexpr (kGradient) {
    if (job.zero_rows.base != nullptr)
      zero_rows(job.zero_rows, head, tokens, tile_begin, tile_count, tid, Geometry::kThreads);
  }
  __syncthreads();

  // The window: the tile plus the outside parts of the blocks that straddle its ends (those
  // tokens lie in the document of the tile's first or last token).
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
    // These bounds only bind for invalid cu_seqlens: never read outside the tensor.
    window_begin = max(window_begin, max(tile_begin - kMaxHaloTokens, 0));
    window_end = min(window_end, min(tile_end + kMaxHaloTokens, tokens));
  }

  // ---- 3. per-token amax --------------------------------------------------------------------
  // A copy whose amax is of the untransformed |x| (the identity; x * fl(1/l), multiplied after)
  // reuses the previous copy's when that one's is too (the dO job's two copies).
  float combined[kQuadTokens] = {};
  bool combined_untransformed = false;
#pragma unroll 1
  for (int k = 0; k < job.num_copies; ++k) {
    const Transform transform = job.copy[k].transform;
    const bool untransformed = amax_of_untransformed<kGradient>(transform);
    if (!(untransformed && combined_untransformed)) {
      float amax[kQuadTokens] = {};
#pragma unroll 1
      for (int n = 0; n < Geometry::kSlices; ++n)
        accumulate_amax<kHeadDim, kGradient>(transform, job, head, g.chunk(n), set,
                                             own_chunks(s.input, n, tid), amax);
#pragma unroll
      for (int j = 0; j < kQuadTokens; ++j) combined[j] = Geometry::reduce_chunks(amax[j], MaxOp());
      combined_untransformed = untransformed;
    }
#pragma unroll
    for (int j = 0; j < kQuadTokens; ++j) {
      if (set.valid(j) && g.sub_chunk == 0) {  // one warp holds all of a token's chunks
        const float a = finish_amax<kGradient>(transform, job, head, set, j, combined[j]);
        s.amax[k][set.token(j) - window_origin] = amax_bits(a);
      }
    }
  }
  if (job.lse_shift.out != nullptr) lse_shift_dots(job, g, head, set, s);

  const HaloWindow halo_window{window_begin, tile_begin, tile_end, window_end};
#pragma unroll 1
  for (int base = 0; base < halo_window.count(); base += Geometry::kTokensPerHaloPass) {
    const HaloSlot slot = halo_window.slot<kHeadDim>(base, tid);
    const int chunk = slot.chunk;
    const HaloToken halo{slot.t, slot.ok, s.doc_begin[slot.left ? 0 : tile_count - 1]};
    const RegisterChunk hx{halo.ok ? load_chunk(job.x, halo.t, head, chunk) : zero_chunk()};
#pragma unroll 1
    for (int k = 0; k < job.num_copies; ++k) {
      const Transform transform = job.copy[k].transform;
      if (job.copy[k].blocks == BlockKind::kToken) continue;
      float amax[1] = {0.0f};
      accumulate_amax<kHeadDim, kGradient>(transform, job, head, chunk, halo, hx, amax);
      amax[0] = Geometry::reduce_halo_lanes(amax[0], MaxOp());
      if (halo.ok && chunk == 0) {
        const float a = finish_amax<kGradient>(transform, job, head, halo, 0, amax[0]);
        s.amax[k][halo.t - window_origin] = amax_bits(a);
      }
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
      report_infinite_amax(job, bits);
      const int e = copy.static_exponents != nullptr
                        ? static_scale_exponent(copy.static_exponents[head])
                        : scale_exponent(__uint_as_float(bits));
      s.exponent[k][tid] = int8_t(e);
#pragma unroll
      for (int n = 0; n < kMaxExponentOutputs; ++n)
        if (copy.exponents[n] != nullptr) copy.exponents[n][out_index] = int8_t(e);
    }
    if (job.lse_shift.out != nullptr) job.lse_shift.out[out_index] = lse_shift_value(job, tid, s);
  }
  // The copies' amax outputs: the tile's own tokens' maxima, one atomic per warp of them.
  for (int k = 0; k < job.num_copies; ++k) {
    if (job.copy[k].amax_out != nullptr && tid < kTileTokens)
      add_tile_amax(s.amax[k] + (tile_begin - window_origin), tile_count, tid,
                    job.copy[k].amax_out + head);
  }
  __syncthreads();

  // ---- 5. values ----------------------------------------------------------------------------
  [[maybe_unused]] float delta[kQuadTokens] = {};
#pragma unroll 1
  for (int k = 0; k < job.num_copies; ++k) {
    const CopySpec& copy = job.copy[k];
#pragma unroll 1
    for (int n = 0; n < Geometry::kSlices; ++n) {
      const int chunk = g.chunk(n);
      QuadTokens vset = set;
      vset.tile_begin = opaque(tile_begin);
      uint32_t codes[kQuadTokens][kCodeWords];
      transform_tokens<kHeadDim, kGradient>(
          copy.transform, job, head, chunk, vset, own_chunks(s.input, n, tid),
          [&](int j, const float(&v)[kChunkChannels]) {
            const int e = s.exponent[k][vset.local(j)];
            encode_chunk(v, exp2_int(-e), codes[j]);
            if (!vset.valid(j)) {
#pragma unroll
              for (int w = 0; w < kCodeWords; ++w) codes[j][w] = 0u;
            } else if (copy.row_major != nullptr) {
              store_row_major(copy.row_major, vset.token(j), job.layout_heads, head, kHeadDim,
                              chunk, codes[j]);
            }
            if constexpr (kGradient) {
              if (k == 0 && job.delta.out != nullptr) {
                const auto o = own_chunks(s.o_input, n, tid);
                delta[j] = job.delta.from_input ? add_input_delta_dot(o, j, v, delta[j])
                                                : add_delta_dot(o, j, codes[j], delta[j]);
              }
            }
          });
      if (copy.token_major != nullptr) stage_codes(s.stage, g, chunk, copy.order, codes);
    }
    if (copy.token_major != nullptr)
      flush_token_major<kHeadDim>(s.stage, copy.token_major, head, tile_begin, tokens);
  }
  if constexpr (kGradient) {
    if (job.delta.out != nullptr) {
#pragma unroll
      for (int j = 0; j < kQuadTokens; ++j) {
        const float sum = Geometry::reduce_chunks(delta[j], SumOp());
        if (set.valid(j) && g.sub_chunk == 0)
          job.delta.out[int64_t(head) * tokens + set.token(j)] =
              job.delta.from_input ? sum : __fmul_rn(exp2_int(s.exponent[0][set.local(j)]), sum);
      }
    }
  }
}

}  // namespace flamia::quantize
