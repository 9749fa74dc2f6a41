// The FP8 backward's dQ warpgroup and its hand-off from the two key warpgroups (numerics §5.7).
//
// Per step, each key warpgroup waits until the step's buffer is free (kScoreGradientEmpty +
// buffer), stores y_ij = x_ij 2^ekc_j of its 64 keys (x = dS 2^eq_i from score_gradient_half,
// 2^ekc_j the tile's centered-key scales, which the dQ warpgroup computes once; head dim 64,
// kDqAppliesKeyScale: x itself, and the dQ warpgroup forms y as it reads) into the step's
// ScoreGradientTile, arrives on kScoreGradientFull + buffer and goes on with its dV and dK
// products and the next step. The dQ warpgroup runs the same sequence of steps, at most two
// behind:
//   gq_i = scale_exponent(max_j |y_ij| 2^-eq_i) over the tile's 128 keys,
//   Ĝ    = e4m3(y_ij * 2^-(gq_i + eq_i)), packed straight into FP8 A fragments (head dim 128
//          reads y twice, for the amax and then for the operand, and releases the buffer after;
//          64 holds y in registers and releases it before the amax: query_gradient_operand),
//   dQ  += (Ĝ K̂c) * softmax_scale * 2^gq_i: register-A wgmma in slices of 32 columns, staged
//          and added to the FP32 buffer by one bulk reduction per warp (in key-tile order when
//          deterministic: a CTA passes the turn once its reductions are done).
// These are the values of the contract's operation order, so Ĝ is bit for bit what a single
// pair of warpgroups would pack; only the FP32 additions' order varies, as with any atomics.
// The key warpgroups thereby meet each other only at their loads' barrier, and their dQ
// bookkeeping (a column amax across both, the Ĝ transpose, the dQ product's wait, the additions)
// runs beside them, in a third warp per scheduler.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/fp8_numerics.h"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_params.h"
#include "kernels/backward/dq_accumulate.cuh"
#include "kernels/backward/mma.cuh"
#include "kernels/backward/query_pipeline.cuh"
#include "kernels/backward/shared_storage.cuh"
#include "kernels/backward/tile_factors.cuh"
#include "kernels/common/softmax_numerics.cuh"
#include "kernels/common/timeline.cuh"
#include "kernels/hopper/bulk_reduce.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace flamia::backward {

constexpr int kFp8CtaThreads = kCtaThreads</*kBf16Grad=*/false>;

// ---- key warpgroup side ------------------------------------------------------------------------

// The thread's 32 values of y = x 2^ekc_j (rows: its two keys; columns: its 16 queries; the
// rounding the contract specifies: one product) into the step's tile, between the wait for the
// buffer and the signal that it is full. The wait also orders the dQ warpgroup's scales
// (written before it first frees a buffer) before their reads. Touches no wgmma register, so it
// may run while the step's dV and dK products are in flight. (The product costs a key
// warpgroup one multiply per value. The dQ warpgroup would pay two at head dim 128, because it
// reads the tile twice, and its 88 registers spilled with them (session 38). It is not the
// critical path there: the timeline probe has it waiting for a full buffer 41-46% of the key
// steps' time (session 45).) kDqAppliesKeyScale (head dim 64): x itself, the dQ warpgroup forms
// y (query_gradient_operand).
template <int kHeadDim>
__device__ __forceinline__ void hand_off_score_gradient(const float (&x)[kScoreRegisters],
                                                        const int (&tile_row)[kRowsPerThread],
                                                        int lane, const float* key_centered_scale,
                                                        ScoreGradientTile& tile, int buffer) {
  const auto since = timeline::start_wait();
  hopper::named_barrier_sync(kScoreGradientEmpty + buffer, kFp8CtaThreads);
  if (threadIdx.x == 0) timeline::end_wait(timeline::kHandOffFree, since);
  if constexpr (kDqAppliesKeyScale<kHeadDim>) {
#pragma unroll
    for (int i = 0; i < kScoreRegisters; ++i)
      tile.y[register_column(lane, i)][tile_row[register_row(i)]] = x[i];
  } else {
    const float key_scale[kRowsPerThread] = {key_centered_scale[tile_row[0]],
                                             key_centered_scale[tile_row[1]]};
#pragma unroll
    for (int i = 0; i < kScoreRegisters; ++i)
      tile.y[register_column(lane, i)][tile_row[register_row(i)]] =
          __fmul_rn(x[i], key_scale[register_row(i)]);
  }
  hopper::named_barrier_arrive(kScoreGradientFull + buffer, kFp8CtaThreads);
}

// ---- dQ warpgroup ------------------------------------------------------------------------------

// n of one dQ wgmma (16 accumulator registers): the products run in column slices, two in flight,
// so that one slice's staging stores overlap the next slice's product.
constexpr int kDqProductColumns = 32;
constexpr int kDqProductRegisters = accumulator_registers(kDqProductColumns);
constexpr int kFloatsPerLoad = 4;  // 16-byte shared loads of y

// The step's two query rows of this thread (tile-relative row0 and row0 + 8): their 2^-eq_i,
// the warp's rows inside the document, and after the amax their dQ scales.
struct DqRowFactors {
  float q_inv_scale[kRowsPerThread];    // 2^-eq_i
  float dq_scale[kRowsPerThread];       // softmax_scale * 2^gq_i
  float operand_scale[kRowsPerThread];  // 2^-(gq_i + eq_i): y -> Ĝ
  // The warp's 16 rows inside the document, consecutive: (first tile row) << kStagedCountBits |
  // count (0: none).
  int staged_rows;
};

constexpr int kStagedRowsPerWarp = 16;
constexpr int kStagedCountBits = 8;  // DqRowFactors::staged_rows: a count of at most 16

__device__ __forceinline__ DqRowFactors fetch_dq_rows(const BackwardParams& p,
                                                      const KeyTileItem& item, int head, int q0,
                                                      int row0) {
  DqRowFactors f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = q0 + row0 + 8 * r;
    const bool visible = query_visibility_index(item.span, i, p.causal != 0) != kQueryOutside;
    const int eq = visible ? int(p.q_exp[int64_t(head) * p.total_q + i]) : 0;
    f.q_inv_scale[r] = exp2_int(-eq);
  }
  const int warp_row = row0 & -kStagedRowsPerWarp;
  const int first = max(q0 + warp_row, item.span.q_start) - q0;
  const int end = min(q0 + warp_row + kStagedRowsPerWarp, item.span.q_end) - q0;
  f.staged_rows = end > first ? first << kStagedCountBits | (end - first) : 0;
  return f;
}

// The first of the four keys of A-fragment register 2 half + r (hopper-fp8-facts.md: row
// 16 w + lane / 4 + 8 (r & 1), k 16 (r >> 1) + 4 (lane & 3) + byte).
__device__ __forceinline__ int fragment_key(int kk, int half, int lane) {
  return kFp8MmaK * kk + 16 * half + kFloatsPerLoad * (lane & 3);
}

// y of those four keys of `row`.
__device__ __forceinline__ float4 load_y(const ScoreGradientTile& tile, int row, int key) {
  return *reinterpret_cast<const float4*>(&tile.y[row][key]);
}

// 2^ekc_j of the tile's 128 keys into shared memory, for the key warpgroups' hand-off: one per
// thread of the dQ warpgroup (then its barrier, before it first frees a buffer).
__device__ __forceinline__ void store_key_centered_scales(const BackwardParams& p,
                                                          const KeyTileItem& item, int thread,
                                                          float* key_centered_scale) {
  const int j = item.key0 + thread;
  const bool valid = key_visibility_index(item.span, j, p.causal != 0) != kKeyOutside;
  const int ekc = valid ? int(p.k_centered_exp[int64_t(item.kv_head) * p.total_k + j]) : 0;
  key_centered_scale[thread] = exp2_int(ekc);
  hopper::named_barrier_sync(kDqWarpgroupBarrier, kDqWarpgroupThreads);
}

// Visits y of the thread's fragment keys: visit(kk, half, r, y) for each k step kk,
// half and row r, the four keys of A-fragment register 2 half + r. kBoundEachHalf: where the
// compiler may not batch loads further ahead (after each half, else after each k step), which
// keeps the dQ warpgroup within its 88 registers.
template <bool kBoundEachHalf, typename Visit>
__device__ __forceinline__ void for_each_fragment_quad(const ScoreGradientTile& tile, int row0,
                                                       int lane, Visit&& visit) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / kFp8MmaK; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = fragment_key(kk, half, lane);
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) visit(kk, half, r, load_y(tile, row0 + 8 * r, key));
      if constexpr (kBoundEachHalf) asm volatile("" ::: "memory");
    }
    if constexpr (!kBoundEachHalf) asm volatile("" ::: "memory");
  }
}

// y of the thread's fragment keys held in registers (head dim 64, where the dQ warpgroup has
// the registers): read once, so that the hand-off buffer is released before the amax.
struct HeldFragmentQuads {
  float4 y[kBlockN / kFp8MmaK][2][kRowsPerThread];
  template <typename Visit>
  __device__ __forceinline__ void operator()(Visit&& visit) const {
#pragma unroll
    for (int kk = 0; kk < kBlockN / kFp8MmaK; ++kk)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) visit(kk, half, r, y[kk][half][r]);
  }
};

// gq_i from max_j |y_ij| over the 128 keys (the row's quad of lanes holds 32 keys each), and the
// scales that follow from it (the rule of numerics §5.7: 2^-(gq + eq) clamped to FP32's normal
// powers of two by power_of_two). for_each_y(visit): the thread's y quads (from the hand-off
// tile, for_each_fragment_quad, or HeldFragmentQuads).
template <typename ForEachY>
__device__ __forceinline__ void find_dq_scales(ForEachY&& for_each_y, float softmax_scale,
                                               DqRowFactors& f) {
  float row_amax[kRowsPerThread] = {0.0f, 0.0f};
  for_each_y([&](int, int, int r, const float4& v) {
    row_amax[r] =
        fmaxf(fmaxf(row_amax[r], fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
  });
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    float amax = row_amax[r];
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const int gq = scale_exponent_branch_free(__fmul_rn(amax, f.q_inv_scale[r]));
    f.dq_scale[r] = softmax_scale * exp2_int(gq);
    f.operand_scale[r] = __fmul_rn(power_of_two(-gq), f.q_inv_scale[r]);
  }
}

// Ĝ as the A operand of dQ = Ĝ K̂c: 4 k32 steps of 4 registers.
template <typename ForEachY>
__device__ __forceinline__ void pack_query_gradient_operand(ForEachY&& for_each_y,
                                                            const DqRowFactors& f,
                                                            uint32_t (&g)[kBlockN / kFp8MmaK][4]) {
  for_each_y([&](int kk, int half, int r, const float4& v) {
    const float s = f.operand_scale[r];
    g[kk][2 * half + r] =
        pack_e4m3x4(__fmul_rn(v.x, s), __fmul_rn(v.y, s), __fmul_rn(v.z, s), __fmul_rn(v.w, s));
  });
}

// The step's Ĝ and dQ scales from its hand-off tile; releases the tile (release()) as soon as
// the thread has read it: after the operand at head dim 128 (y is read twice, for the amax and
// for the operand, within the warpgroup's 88 registers), before the amax at 64 (y held, formed
// from x as it is read: kDqAppliesKeyScale, 2^ekc_j from key_centered_scale).
template <int kHeadDim, typename Release>
__device__ __forceinline__ void query_gradient_operand(
    const ScoreGradientTile& tile, const float* key_centered_scale, int row0, int lane,
    float softmax_scale, DqRowFactors& f, uint32_t (&g)[kBlockN / kFp8MmaK][4], Release&& release) {
  auto from_tile = [&](auto bound_each_half) {
    return [&, bound_each_half](auto&& visit) {
      for_each_fragment_quad<decltype(bound_each_half)::value>(tile, row0, lane, visit);
    };
  };
  if constexpr (kHeadDim == 64) {
    static_assert(kDqAppliesKeyScale<kHeadDim>, "head dim 64's tile holds x");
    HeldFragmentQuads held;
    from_tile(std::true_type{})([&](int kk, int half, int r, const float4& x) {
      const float4 s = *reinterpret_cast<const float4*>(
          &key_centered_scale[fragment_key(kk, half, lane)]);  // 2^ekc_j of the four keys
      held.y[kk][half][r] = make_float4(__fmul_rn(x.x, s.x), __fmul_rn(x.y, s.y),
                                        __fmul_rn(x.z, s.z), __fmul_rn(x.w, s.w));
    });
    release();
    find_dq_scales(held, softmax_scale, f);
    pack_query_gradient_operand(held, f, g);
  } else {
    static_assert(!kDqAppliesKeyScale<kHeadDim>, "head dim 128's tile holds y");
    find_dq_scales(from_tile(std::true_type{}), softmax_scale, f);
    pack_query_gradient_operand(from_tile(std::false_type{}), f, g);
    release();
  }
}

// ---- dQ through bulk reductions (both the atomic and the deterministic order) -------------------
//
// Each thread writes its scaled dQ values (its two query rows) into the step's staging tile, and
// the TMA unit adds the warp's 16 rows that lie in the document to the FP32 dQ buffer with one
// bulk reduction (cp.reduce.async.bulk .add.f32: element-wise atomic adds), issued by the warp's
// first lane: the rows are consecutive queries of one head, one contiguous block in both the
// staging tile and the buffer (dq_buffer.h), and a document's rows are consecutive, so the
// block is one range. The writers and the issuer are lanes of one warp, so a warp sync orders
// them, and the issuer alone waits before the rows are rewritten.

__device__ __forceinline__ bool issues_rows(int lane) {
  return lane == 0;
}

// Before the step's values are written: the previous step's reduction of the warp's rows has
// read the staging tile.
__device__ __forceinline__ void wait_for_staging_rows(int lane) {
  if (issues_rows(lane)) hopper::bulk_wait_source_read();
  __syncwarp();
}

// One column slice (kDqProductColumns from d0) of the thread's rows, scaled by
// softmax_scale * 2^gq_i, into the staging tile.
template <int kHeadDim>
__device__ __forceinline__ void stage_dq_slice(DqStagingTile<kHeadDim>& staging,
                                               const float (&dq)[kDqProductRegisters],
                                               const DqRowFactors& f, int row0, int d0, int lane) {
#pragma unroll
  for (int i = 0; i < kDqProductRegisters; i += 2) {
    const int r = register_row(i);
    const float scale = f.dq_scale[r];
    *reinterpret_cast<float2*>(&staging.row[row0 + 8 * r][d0 + register_column(lane, i)]) =
        make_float2(__fmul_rn(dq[i], scale), __fmul_rn(dq[i + 1], scale));
  }
}

// After every slice is staged: the warp's first lane hands the warp's rows inside the document
// (consecutive: a document's rows are) to the TMA unit; rows outside it are never added.
template <int kHeadDim>
__device__ __forceinline__ void add_staged_rows(const BackwardParams& p,
                                                const DqStagingTile<kHeadDim>& staging,
                                                const DqRowFactors& f, int head, int q0, int lane) {
  hopper::fence_proxy_async_shared();  // the writers' stores, before the TMA unit reads them
  __syncwarp();
  if (!issues_rows(lane)) return;
  if (f.staged_rows != 0) {
    const int first = f.staged_rows >> kStagedCountBits;
    const uint32_t rows = f.staged_rows & ((1u << kStagedCountBits) - 1);
    constexpr int kRowBytes = DqStagingTile<kHeadDim>::kRowFloats * sizeof(float);
    hopper::bulk_reduce_add_f32(p.dq_accum + dq_buffer_row(head, q0 + first, p.total_q, kHeadDim),
                                staging.row[first], rows * kRowBytes);
  }
  hopper::bulk_commit();
}

// The dQ warpgroup's whole CTA: every step of the key tile, in the key warpgroups' order.
template <int kHeadDim>
__device__ __forceinline__ void run_dq_warpgroup(const BackwardParams& p, const KeyTileItem& item,
                                                 Fp8Storage<kHeadDim>& smem, int window) {
  const int thread = int(threadIdx.x) - kThreads;
  const int warp = thread / kWarpSize;
  const int lane = thread % kWarpSize;
  const int row0 = 16 * warp + lane / 4;
  const bool deterministic = p.deterministic != 0;
  const DqAdders adders{kThreads, kDqWarpgroupBarrier, kDqWarpgroupThreads};
  store_key_centered_scales(p, item, thread, smem.key_centered_scale);
  if (thread == 0) {
    timeline::stamp(blockIdx.x, 4);
    timeline::reset_counter(timeline::kHandOffFull);
  }

  // Both buffers start empty; afterwards reading step s's tile frees it for step s + 2.
  StepCursor step = first_step(item, p.causal != 0);
  StepCursor freed = step;
#pragma unroll
  for (int b = 0; b < kScoreGradientBuffers; ++b) {
    if (freed.valid(item, p.causal != 0))
      hopper::named_barrier_arrive(kScoreGradientEmpty + freed.stage, kFp8CtaThreads);
    freed = freed.next(p.group_size);
  }
  while (step.valid(item, p.causal != 0)) {
    const int head = step.head(item, p.group_size);
    DqRowFactors rows = fetch_dq_rows(p, item, head, step.q0, row0);
    const ScoreGradientTile& tile = smem.score_gradient[step.stage];
    const auto since = timeline::start_wait();
    hopper::named_barrier_sync(kScoreGradientFull + step.stage, kFp8CtaThreads);
    if (thread == 0) timeline::end_wait(timeline::kHandOffFull, since);
    uint32_t g[kBlockN / kFp8MmaK][4];
    query_gradient_operand<kHeadDim>(
        tile, smem.key_centered_scale, row0, lane, p.softmax_scale, rows, g, [&] {
          if (freed.valid(item, p.causal != 0))
            hopper::named_barrier_arrive(kScoreGradientEmpty + step.stage, kFp8CtaThreads);
        });
    freed = freed.next(p.group_size);

    // dQ = Ĝ K̂c in column slices: slice c + 1's product is in flight while slice c is staged.
    auto add_partial = [&] {
      constexpr int kSlices = kHeadDim / kDqProductColumns;
      float dq[2][kDqProductRegisters];
      auto issue = [&](int slice) {
        hopper::warpgroup_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockN / kFp8MmaK; ++kk)
          mma_fp8_rs<kDqProductColumns>(
              dq[slice % 2], g[kk],
              fp8_desc<kBlockN>(smem.k_centered_t + slice * kDqProductColumns * kBlockN, kk),
              kk > 0);
        hopper::warpgroup_commit();
      };
      issue(0);
      wait_for_staging_rows(lane);
#pragma unroll
      for (int slice = 0; slice < kSlices; ++slice) {
        if (slice + 1 < kSlices) {
          issue(slice + 1);
          hopper::warpgroup_wait<1>();
        } else {
          hopper::warpgroup_wait<0>();
        }
        hopper::fence_registers(dq[slice % 2]);
        stage_dq_slice<kHeadDim>(smem.dq_staging, dq[slice % 2], rows, row0,
                                 slice * kDqProductColumns, lane);
      }
      add_staged_rows<kHeadDim>(p, smem.dq_staging, rows, head, step.q0, lane);
    };
    if (deterministic) {
      in_dq_turn(dq_semaphore(p, item, head, step.q0), dq_turn(p, item, step.q0, window), adders,
                 [&] {
                   hopper::fence_proxy_async_global();  // the turn (acquired), before this CTA's
                                                        // reductions
                   add_partial();
                   if (issues_rows(lane)) hopper::bulk_wait_all();  // done before the turn passes
                 });
    } else {
      add_partial();
    }
    step = step.next(p.group_size);
  }
  if (thread == 0) timeline::stamp(blockIdx.x, 5);
  // The staging tile must outlive the reductions that read it.
  if (issues_rows(lane)) hopper::bulk_wait_all();
  if (thread == 0) {
    timeline::stamp(blockIdx.x, 6);
    timeline::record_counter(blockIdx.x, timeline::kHandOffFull);
  }
}

}  // namespace flamia::backward
