// The backward kernel (docs/numerics.md §5) for sm_90a.
//
// Grid: x = KV head * key tile pairs + rank in the launch order (backward_schedule.h: the
// (document, key tile) pairs with the most work first). One CTA per (KV head, 128-key tile
// starting at floor16(k_start) + n * 128): two key warpgroups, where warpgroup w owns keys
// 64w .. 64w + 63 of the tile, and on the FP8 path a dQ warpgroup (dq_warpgroup.cuh). For every
// query tile (64 queries from floor16(q_start) + m * 64; causal: those that see the key tile), the
// last first (StepCursor), and every query head of the KV group, one step:
//   Sᵀ  = K̂ Q̂ᵀ                (FP8 SS; bitwise the forward's S)
//   P̂ᵀ  = e4m3(exp2(t - M + 8)) (the forward's op sequence and saved M)
//   dPᵀ = V̂ dÔᵀ (FP8 SS) or V dOᵀ (BF16 SS)
//   dSᵀ = P ∘ (dPᵀ - D)
//   dV += P̂ᵀ dÔ''             (FP8 RS, A from registers)
//   dK += Ĥᵀ Q̂ (FP8 RS) or dSᵀ Q (BF16 RS)
//   FP8:      x = dS 2^eq handed to the dQ warpgroup, which runs dQ partial = Ĝ K̂c (FP8 RS)
//             and adds it to the FP32 dQ buffer by bulk reductions (dq_warpgroup.cuh),
//   BF16grad: dQ partial = dS K (BF16 SS), added by the key warpgroups themselves
//   (float2 atomics, or in key-tile order when deterministic).
// dK and dV stay in registers across the whole CTA and are written once, as BF16.
//
// Loads: the key tiles by cooperative cp.async copies, once; the query tiles of each step by TMA
// (FP8; thread 0 issues them) or cp.async copies (BF16grad), pipelined one step ahead over two
// shared-memory stages (query_pipeline.cuh): the copies and the query factors of step s + 1 are
// in flight while step s runs its products.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/hopper/dependent_launch.cuh"
#include "common/views.h"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_params.h"
#include "kernels/backward/dq_accumulate.cuh"
#include "kernels/backward/dq_warpgroup.cuh"
#include "kernels/backward/mma.cuh"
#include "kernels/backward/query_pipeline.cuh"
#include "kernels/backward/score_gradient.cuh"
#include "kernels/backward/shared_storage.cuh"
#include "kernels/backward/tile_factors.cuh"
#include "kernels/backward/tile_geometry.cuh"
#include "kernels/backward/tile_loads.cuh"
#include "kernels/common/staged_rows.cuh"
#include "kernels/common/timeline.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace flamia::backward {

// ---- products ---------------------------------------------------------------------------------

// Sᵀ of the warpgroup's 64 keys against the tile's 64 queries, and a half of dPᵀ (queries 0..31
// or 32..63). Neither committed nor waited for. kOverwrite (FP8): accumulators that live across
// the step loop (mma_fp8_ss_step).
template <int kHeadDim, bool kBf16Grad, bool kOverwrite = false>
__device__ __forceinline__ void mma_score_gradient_half(
    float (&dp)[kHalfScoreRegisters], const BackwardStorage<kHeadDim, kBf16Grad>& smem,
    const typename BackwardStorage<kHeadDim, kBf16Grad>::QueryStage& tiles, int key_row0,
    int half) {
  constexpr int kHalfColumns = kBlockM / kScoreHalves;
  if constexpr (kBf16Grad) {
    const uint8_t* d_o = tiles.d_o16 + half * kHalfColumns * kPanelBytes;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / kBf16MmaK; ++kk)
      mma_bf16_ss<kHalfColumns>(
          dp, paneled_desc(smem.v16 + key_row0 * kPanelBytes, kBlockN * kPanelBytes, kk),
          paneled_desc(d_o, kBlockM * kPanelBytes, kk), kk > 0);
  } else {
    const uint8_t* d_o = tiles.d_o + half * kHalfColumns * kHeadDim;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / kFp8MmaK; ++kk)
      mma_fp8_ss_step<kHalfColumns, kOverwrite>(
          dp, fp8_desc<kHeadDim>(smem.v + key_row0 * kHeadDim, kk), fp8_desc<kHeadDim>(d_o, kk),
          kk);
  }
}

template <int kHeadDim, bool kBf16Grad, bool kOverwrite = false>
__device__ __forceinline__ void mma_scores(
    float (&s)[kScoreRegisters], const BackwardStorage<kHeadDim, kBf16Grad>& smem,
    const typename BackwardStorage<kHeadDim, kBf16Grad>::QueryStage& tiles, int key_row0) {
#pragma unroll
  for (int kk = 0; kk < kHeadDim / kFp8MmaK; ++kk)
    mma_fp8_ss_step<kBlockM, kOverwrite>(s, fp8_desc<kHeadDim>(smem.k + key_row0 * kHeadDim, kk),
                                         fp8_desc<kHeadDim>(tiles.q, kk), kk);
}

// The products that open a step, one commit group: Sᵀ and dPᵀ's first half, and with
// kPipelinedOpening dPᵀ's second half too (otherwise the step issues it after the first half's
// element-wise work, which then runs under it).
struct OpeningProducts {
  float s[kScoreRegisters];
  float dp[kHalfScoreRegisters];
  float dp_second[kHalfScoreRegisters];
};

template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void issue_opening_products(
    OpeningProducts& opening, const BackwardStorage<kHeadDim, kBf16Grad>& smem,
    const typename BackwardStorage<kHeadDim, kBf16Grad>::QueryStage& tiles, int key_row0) {
  constexpr bool kOverwrite = kPipelinedOpening<kHeadDim, kBf16Grad>;  // loop-carried there
  hopper::warpgroup_fence();
  mma_scores<kHeadDim, kBf16Grad, kOverwrite>(opening.s, smem, tiles, key_row0);
  mma_score_gradient_half<kHeadDim, kBf16Grad, kOverwrite>(opening.dp, smem, tiles, key_row0, 0);
  if constexpr (kOverwrite)
    mma_score_gradient_half<kHeadDim, kBf16Grad, kOverwrite>(opening.dp_second, smem, tiles,
                                                             key_row0, 1);
  hopper::warpgroup_commit();
}

// dV += P̂ᵀ dÔ'' (64 queries = 2 k32 steps; B = dÔ''ᵀ [d][query], 64-byte rows). Not committed.
template <int kHeadDim>
__device__ __forceinline__ void mma_value_gradient(float (&dv)[kHeadDim / 2],
                                                   const uint32_t (&p_hat)[kBlockM / kFp8MmaK][4],
                                                   const uint8_t* d_o_scaled_t) {
#pragma unroll
  for (int kk = 0; kk < kBlockM / kFp8MmaK; ++kk)
    mma_fp8_rs<kHeadDim>(dv, p_hat[kk], fp8_desc<kBlockM>(d_o_scaled_t, kk), 1);
}

// ---- the step ---------------------------------------------------------------------------------

// The block exponent ew of dÔ'' that key row `tile_row`'s dV products carry in the step: the
// query tile's (BF16grad's factors hold it once; the FP8 path's per row, read at the tile's
// first row inside the document: every such row has it), or, in a packed run, that of the key's
// own document, read at its own row (a packed key is query row tile_row < kBlockM; rows past it
// hold no key, and their zero accumulators take any unit).
__device__ __forceinline__ int row_value_block_exp(const QueryFactors& qf, const KeyTileItem&, int,
                                                   int) {
  return qf.value_block_exp;
}
__device__ __forceinline__ int row_value_block_exp(const Fp8QueryFactors& qf,
                                                   const KeyTileItem& item, int q0, int tile_row) {
  return qf.value_block_exp[item.packed ? tile_row % kBlockM : max(q0, item.span.q_start) - q0];
}

// Per-thread state that lives across the whole CTA.
template <int kHeadDim>
struct KeyGradientState {
  float dv[kHeadDim / 2];  // in units of 2^dv_unit (see below)
  float dk[kHeadDim / 2];  // row r in units of 2^(dK unit r) (FP8) or 1 (BF16grad)
  // dÔ'' carries one scale 2^ew per (head, 64-query block): a factor along dV's reduction that
  // changes from step to step. It cannot be folded into P̂ (that would change the forward's
  // P̂), so the dV accumulator is kept in units of the current step's 2^ew: when ew changes, the
  // rows are multiplied by 2^(old - new) (exact, a power of two) before the step's product is
  // added with weight 1. The final dV is acc * 2^dv_unit * 2^-ev_j. Per row: the two rows share
  // the step's ew, except in a packed run, whose documents have their own (row_value_block_exp).
  RowExponentPair dv_unit;
  // dK likewise, per key row: Ĥ's exponent gk_j changes per (row, query tile, head). The FP8
  // path keeps the two rows' units in shared memory (Fp8Storage::dk_units, one word per key
  // warpgroup thread): the head dim 128 key warpgroups have no register left across the step,
  // and ptxas spilled them to local memory every step.
};

template <int kRegisters>
__device__ __forceinline__ void rescale_rows(float (&acc)[kRegisters],
                                             const float (&factor)[kRowsPerThread]) {
#pragma unroll
  for (int i = 0; i < kRegisters; ++i) acc[i] *= factor[register_row(i)];
}

// Debug hook: writes this step's P̂ for visible pairs as the real value it stands for,
// e4m3_decode(P̂) * 2^(M_i - 8) (exact), so that passes with different offsets compare directly.
template <bool kStaticScales, typename Factors>
__device__ __forceinline__ void write_debug_p_hat(const BackwardParams& p, const KeyTileItem& item,
                                                  const uint32_t (&p_hat)[kBlockM / kFp8MmaK][4],
                                                  const KeyRowFactors& key, const Factors& qf,
                                                  const int (&tile_row)[kRowsPerThread], int head,
                                                  int q0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kBlockM / kFp8MmaK; ++kk)
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int i = fp8_operand_source_register(kk, w, b);
        const int r = register_row(i);
        const int col = register_column(lane, i);
        if (!visible_pair(key.visibility[r], qf.visibility[col], key.window)) continue;
        const uint8_t code = uint8_t(p_hat[kk][w] >> (8 * b));
        const int64_t at =
            (int64_t(head) * p.total_q + q0 + col) * p.total_k + item.key0 + tile_row[r];
        p.debug_p_hat[at] = e4m3_decode(code) * power_of_two(softmax_offset_of<kStaticScales>(
                                                    qf.offset[col], key.score[r].value_exponent));
      }
}

// The thread's key warpgroup, warp-uniform where kUniformKeyWarpgroup.
template <int kHeadDim>
__device__ __forceinline__ int key_warpgroup_index() {
  if constexpr (kUniformKeyWarpgroup<kHeadDim>) return hopper::warpgroup_index_uniform();
  return threadIdx.x / kWarpgroupThreads;
}

// Work placed between a wgmma's issue and its wait must read no wgmma's accumulator and must not
// branch, or ptxas serializes every wgmma of the kernel (C7517/C7518).
// kDebugPHat: the test instrument's instantiation (write_debug_p_hat). It is a template
// parameter, not a runtime branch, so the production kernel's step loop carries none of its
// code (it was a third of the loop's static instructions).
// BF16grad's dQ partial of a step (the FP8 dQ lives in the dQ warpgroup).
template <int kHeadDim, bool kBf16Grad>
struct KeyWarpgroupDq {
  float acc[BackwardTile<kHeadDim>::kDqRegisters];
};
template <int kHeadDim>
struct KeyWarpgroupDq<kHeadDim, false> {};

// kPipelinedOpening: `opening` holds the step's opening products, in flight since the previous
// step (or the prologue), and after this step's hand-off (while its dV and dK products run)
// the next step's opening products are issued into
// `opening` (as soon as its copies have landed), to run under this step's tail. After the last step
// they are issued all the same, on the step's own stage, so that every path through the loop has
// the same wgmma groups in flight (ptxas serializes the products otherwise: C7514); the kernel
// waits for them before its epilogue. Otherwise the step issues its own opening products (`opening`
// is unused).
template <int kHeadDim, bool kBf16Grad, bool kDebugPHat, bool kStaticScales>
__device__ __forceinline__ void backward_step(
    const BackwardParams& p, const KeyTileItem& item, BackwardStorage<kHeadDim, kBf16Grad>& smem,
    KeyGradientState<kHeadDim>& state, const KeyRowFactors& key,
    const int (&tile_row)[kRowsPerThread], const StepCursor& step, bool unmasked,
    KeyWarpgroupDq<kHeadDim, kBf16Grad>& dq, OpeningProducts& opening, const StepCursor& next) {
  constexpr bool kPipelined = kPipelinedOpening<kHeadDim, kBf16Grad>;
  constexpr int kLoadFence = kRebuildLoadFence<kHeadDim, kStaticScales>;
  using Tile = BackwardTile<kHeadDim>;
  const auto& tiles = smem.stage[step.stage];
  const int head = step.head(item, p.group_size);
  const int q0 = step.q0;
  const int warpgroup = key_warpgroup_index<kHeadDim>();
  const int lane = threadIdx.x % kWarpSize;
  const auto& qf = smem.query[step.stage];

  const int key_row0 = warpgroup * kKeysPerWarpgroup;
  OpeningProducts own;  // (the wgmma asm reads its accumulators: a fresh one per step)
  OpeningProducts& products = kPipelined ? opening : own;
  float(&s)[kScoreRegisters] = products.s;
  float ds[kScoreRegisters];  // FP8: x = dS * 2^eq_i (score_gradient_half); BF16grad: dS
  uint32_t p_hat[kBlockM / kFp8MmaK][4];  // P̂ᵀ as dV's A operand, a k step per half
  {
    float(&dp)[kHalfScoreRegisters] = products.dp;
    if constexpr (!kPipelined)
      issue_opening_products<kHeadDim, kBf16Grad>(own, smem, tiles, key_row0);
    hopper::warpgroup_wait<0>();
    hopper::fence_registers(s);
    hopper::fence_registers(dp);
    if constexpr (timeline::kEnabled)
      if (threadIdx.x == 0) timeline::lap(timeline::kStepScoreProducts);
    if (unmasked) {
      rebuild_probabilities<kStaticScales, false, !kBf16Grad, kLoadFence>(s, key, qf, lane);
      score_gradient_half<kBf16Grad, 0, false, kStaticScales>(s, dp, ds, p_hat[0], key, qf, lane);
    } else {
      rebuild_probabilities<kStaticScales, true, !kBf16Grad>(s, key, qf, lane);
      score_gradient_half<kBf16Grad, 0, true, kStaticScales>(s, dp, ds, p_hat[0], key, qf, lane);
    }
    if constexpr (timeline::kEnabled)
      if (threadIdx.x == 0) timeline::lap(timeline::kStepFirstHalf);
  }
  {
    float(&dp)[kHalfScoreRegisters] = kPipelined ? products.dp_second : own.dp_second;
    if constexpr (!kPipelined) {
      hopper::warpgroup_fence();
      mma_score_gradient_half<kHeadDim, kBf16Grad>(dp, smem, tiles, key_row0, 1);
      hopper::warpgroup_commit();
      hopper::warpgroup_wait<0>();
    }
    hopper::fence_registers(dp);
    if constexpr (timeline::kEnabled)
      if (threadIdx.x == 0) timeline::lap(timeline::kStepSecondProduct);
    if (unmasked)
      score_gradient_half<kBf16Grad, 1, false, kStaticScales>(s, dp, ds, p_hat[1], key, qf, lane);
    else
      score_gradient_half<kBf16Grad, 1, true, kStaticScales>(s, dp, ds, p_hat[1], key, qf, lane);
    if constexpr (timeline::kEnabled)
      if (threadIdx.x == 0) timeline::lap(timeline::kStepSecondHalf);
  }
  if constexpr (kDebugPHat)
    write_debug_p_hat<kStaticScales>(p, item, p_hat, key, qf, tile_row, head, q0, lane);

  const int ew[kRowsPerThread] = {row_value_block_exp(qf, item, q0, tile_row[0]),
                                  row_value_block_exp(qf, item, q0, tile_row[1])};
  if (ew[0] != state.dv_unit[0] || ew[1] != state.dv_unit[1]) {
    const float factor[kRowsPerThread] = {power_of_two(state.dv_unit[0] - ew[0]),
                                          power_of_two(state.dv_unit[1] - ew[1])};
    rescale_rows(state.dv, factor);
    state.dv_unit = RowExponentPair(ew[0], ew[1]);
  }

  const int dq_col0 = warpgroup * Tile::kDqColumns;
  if constexpr (kBf16Grad) {
    uint32_t a[kBlockM / kBf16MmaK][4];
    accumulator_to_bf16_operand(ds, a);
    // dQ's A (before the dK product reads `a`: no register of an in-flight wgmma is touched);
    // the previous step's dQ products, its last readers, ended before the step's barrier.
    store_bf16_score_gradient(a, lane, tile_row, smem.ds16);
    hopper::warpgroup_fence();
    mma_value_gradient<kHeadDim>(state.dv, p_hat, tiles.d_o_scaled_t);
#pragma unroll
    for (int kk = 0; kk < kBlockM / kBf16MmaK; ++kk)
      mma_bf16_rs_n_major<kHeadDim>(state.dk, a[kk],
                                    mn_major_desc(tiles.q16, kBlockM * kPanelBytes, kk), 1);
    hopper::warpgroup_commit();

    hopper::fence_proxy_async_shared();
    __syncthreads();
    hopper::warpgroup_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / kBf16MmaK; ++kk)
      mma_bf16_ss_m_major<Tile::kDqColumns>(
          dq.acc, mn_major_desc(smem.ds16, kBlockN * kPanelBytes, kk),
          paneled_desc(smem.k16_t + dq_col0 * kPanelBytes, kHeadDim * kPanelBytes, kk), kk > 0);
    hopper::warpgroup_commit();
    hopper::warpgroup_wait<0>();
    hopper::fence_registers(dq.acc);
  } else {
    RowExponentPair& unit = smem.dk_units[threadIdx.x];
    const RowExponentPair previous = unit;
    int gk[kRowsPerThread] = {previous[0], previous[1]};
    uint32_t h[kBlockM / kFp8MmaK][4];
    key_gradient_operand(ds, gk, h);
    const float factor[kRowsPerThread] = {power_of_two(previous[0] - gk[0]),
                                          power_of_two(previous[1] - gk[1])};
    rescale_rows(state.dk, factor);
    unit = RowExponentPair(gk[0], gk[1]);
    hopper::warpgroup_fence();
    mma_value_gradient<kHeadDim>(state.dv, p_hat, tiles.d_o_scaled_t);
#pragma unroll
    for (int kk = 0; kk < kBlockM / kFp8MmaK; ++kk)
      mma_fp8_rs<kHeadDim>(state.dk, h[kk], fp8_desc<kBlockM>(tiles.q_t, kk), 1);
    hopper::warpgroup_commit();

    // dQ's operand goes to the dQ warpgroup while dV and dK run.
    hand_off_score_gradient<kHeadDim>(ds, tile_row, lane, smem.key_centered_scale,
                                      smem.score_gradient[step.stage], step.stage);
    if constexpr (!kPipelined) hopper::warpgroup_wait<0>();  // dV and dK
    if constexpr (kPipelined) {
      // Sᵀ and dPᵀ read the row-major Q̂ and dÔ tiles, which no mask touches: the copies having
      // landed is enough (the masks and the barrier of finish_step_loads follow, before the next
      // step's element-wise work and dK, dV products).
      const bool more = next.valid(item, p.causal != 0);
      if (more) hopper::mbarrier_wait(&smem.query_full[next.stage], next.phase);
      issue_opening_products<kHeadDim, kBf16Grad>(
          opening, smem, smem.stage[more ? next.stage : step.stage], key_row0);
      hopper::warpgroup_wait<1>();  // dV and dK (the opening runs on)
    }
  }
  hopper::fence_registers(state.dv);
  hopper::fence_registers(state.dk);
  if constexpr (timeline::kEnabled)
    if (threadIdx.x == 0) timeline::lap(timeline::kStepGradients);
}

// Adds BF16grad's dQ partial of the step (backward_step) to the FP32 buffer.
template <int kHeadDim>
__device__ __forceinline__ void accumulate_dq(const BackwardParams& p, const KeyTileItem& item,
                                              const QueryFactors& qf, const StepCursor& step,
                                              const KeyWarpgroupDq<kHeadDim, true>& dq,
                                              int window) {
  const int head = step.head(item, p.group_size);
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int warp = (threadIdx.x / kWarpSize) % kWarpsPerWarpgroup;
  const int lane = threadIdx.x % kWarpSize;
  const int dq_col0 = warpgroup * BackwardTile<kHeadDim>::kDqColumns;
  if (p.deterministic != 0) {
    const DqAdders adders{0, 0, kThreads};
    in_dq_turn(dq_semaphore(p, item, head, step.q0), dq_turn(p, item, step.q0, window), adders,
               [&] {
                 add_dq_partial<kHeadDim, /*kOrdered=*/true>(p, dq.acc, qf, head, step.q0, dq_col0,
                                                             warp, lane);
               });
  } else {
    add_dq_partial<kHeadDim, /*kOrdered=*/false>(p, dq.acc, qf, head, step.q0, dq_col0, warp, lane);
  }
}

// ---- epilogue -----------------------------------------------------------------------------------

// dK and dV as BF16 through shared memory (StagedRows): warpgroup w stages its 64 key rows of each
// in query stage w (free: the loop's last barrier ended every reader of both stages; the dQ
// warpgroup reads none) and each warp copies its own 16 rows out with 16-byte stores of whole
// rows instead of 16 bytes of each of 8 rows (the timeline probe measured ~5 us per CTA for the
// direct stores, which also held up the dQ warpgroup's last steps). Keys outside the document are
// not written. The API guarantees dK's and dV's 16-byte alignment (memory_checks.cpp). The work
// item and the key factors are the main loop's own (live across it anyway: every step reads
// them), so the epilogue starts without a global round trip; V's exponent ev_j is the
// integer-valued float the P̂ rebuild adds (KeyColumnFactors::value_exponent), converted exactly.
template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void write_key_gradients(
    const BackwardParams& p, const KeyTileItem& item, const KeyRowFactors& key,
    const KeyGradientState<kHeadDim>& state, RowExponentPair dk_unit,
    const int (&tile_row)[kRowsPerThread], BackwardStorage<kHeadDim, kBf16Grad>& smem) {
  using Rows = StagedRows<kHeadDim>;
  constexpr int kGradientBytes = kKeysPerWarpgroup * Rows::kRowBytes;  // a warpgroup's dK (or dV)
  static_assert(
      2 * kGradientBytes <= sizeof(typename BackwardStorage<kHeadDim, kBf16Grad>::QueryStage),
      "a query stage holds a warpgroup's dK and dV");
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int lane = threadIdx.x % kWarpSize;
  uint8_t* dk_tile = reinterpret_cast<uint8_t*>(&smem.stage[warpgroup]);
  uint8_t* dv_tile = dk_tile + kGradientBytes;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = tile_row[r] - warpgroup * kKeysPerWarpgroup;
    const float dk_scale = kBf16Grad ? p.softmax_scale : p.softmax_scale * power_of_two(dk_unit[r]);
    const float dv_scale = power_of_two(state.dv_unit[r] - int(key.score[r].value_exponent));
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; i += 2) {
      if (register_row(i) != r) continue;
      const int d = register_column(lane, i);
      const int chunk = d * 2 / Rows::kChunkBytes, in_chunk = (d * 2) % Rows::kChunkBytes;
      Rows::store_pair(dk_tile, row, chunk, in_chunk, state.dk[i] * dk_scale,
                       state.dk[i + 1] * dk_scale);
      Rows::store_pair(dv_tile, row, chunk, in_chunk, state.dv[i] * dv_scale,
                       state.dv[i + 1] * dv_scale);
    }
  }
  const int warp_row0 =
      (tile_row[0] - warpgroup * kKeysPerWarpgroup) / Rows::kRowsPerWarp * Rows::kRowsPerWarp;
  Rows::copy_warp_rows(warp_row0, lane, [&](int row, int element, int at) {
    const int64_t j = item.key0 + warpgroup * kKeysPerWarpgroup + row;
    if (j < item.span.k_start || j >= item.span.k_end) return;
    const uint4 dk = *reinterpret_cast<const uint4*>(dk_tile + at);
    const uint4 dv = *reinterpret_cast<const uint4*>(dv_tile + at);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.dk.data) + j * p.dk.token_stride +
                              int64_t(item.kv_head) * p.dk.head_stride + element) = dk;
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.dv.data) + j * p.dv.token_stride +
                              int64_t(item.kv_head) * p.dv.head_stride + element) = dv;
  });
}

// ---- kernel -------------------------------------------------------------------------------------

// kWindowed: the instantiation for a sliding window (p.sliding_window > 0); the others compile
// every window test away (window = 0), so they are the kernels without windows, unchanged.
// kStaticScales: scale mode kStatic (p.static_key_exp set; rebuild_probabilities).
template <int kHeadDim, bool kBf16Grad, bool kDebugPHat, bool kWindowed, bool kStaticScales>
__global__ void __launch_bounds__(kCtaThreads<kBf16Grad>, 1)
    backward_kernel(const __grid_constant__ BackwardParams p) {
  using Storage = BackwardStorage<kHeadDim, kBf16Grad>;
  extern __shared__ uint8_t smem_raw[];
  // Pointer arithmetic on the __shared__ array (not integer casts) keeps the address space
  // known, so every access compiles to LDS/STS rather than generic loads and stores.
  const uint32_t misalignment = hopper::smem_addr(smem_raw) & (kTileAlignment - 1);
  Storage& smem = *reinterpret_cast<Storage*>(
      smem_raw + ((kTileAlignment - misalignment) & (kTileAlignment - 1)));

  // Timeline probe events (timeline.h; empty in production builds): 0 entry, 1 first step
  // ready, 2 steps done, 3 dK/dV written, and the counters but kHandOffFull (thread 0); 4 scales
  // stored, 5 steps done, 6 reductions complete, kHandOffFull (the dQ warpgroup's first thread).
  const bool laps = timeline::kEnabled && threadIdx.x == 0;  // the key warpgroups' counters
  if (threadIdx.x == 0) timeline::stamp(blockIdx.x, 0);
  if constexpr (timeline::kEnabled) {
    if (laps)
      for (int c = 0; c < timeline::kCounters; ++c)
        if (c != timeline::kHandOffFull) timeline::reset_counter(timeline::Counter(c));
  }
  // Launched early (backward_kernel_instantiate.cuh): nothing in global memory is read before.
  hopper::allow_dependent_launch();
  hopper::wait_for_prior_grids();
  const int pair = key_tile_pair(p);
  if (p.device_status != nullptr && *p.device_status != kDeviceStatusOk) return;
  if (pair == kNoKeyTile) return;
  const int window = kWindowed ? p.sliding_window : 0;
  const KeyTileItem item = key_tile_item(p, pair, window);
  if (key_tile_is_empty(item)) return;
  if constexpr (!kBf16Grad) {
    if (threadIdx.x >= kThreads) {
      hopper::warpgroup_registers_decrease<Fp8RegisterBudget<kHeadDim>::kDqWarpgroup>();
      run_dq_warpgroup<kHeadDim>(p, item, smem, window);
      return;
    }
    hopper::warpgroup_registers_increase<Fp8RegisterBudget<kHeadDim>::kKeyWarpgroup>();
  }

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int warp = (threadIdx.x / kWarpSize) % kWarpsPerWarpgroup;
  const int lane = threadIdx.x % kWarpSize;
  const int first_row = warpgroup * kKeysPerWarpgroup + 16 * warp + lane / 4;
  const int tile_row[kRowsPerThread] = {first_row, first_row + 8};
  StepCursor step = first_step(item, p.causal != 0);
  const UnmaskedQueryTiles unmasked = unmasked_query_tiles(item, p.causal != 0, window);
  QueryFactorFetch factors;
  init_query_pipeline<kHeadDim, kBf16Grad>(smem, p);
  issue_key_tiles<kHeadDim, kBf16Grad>(smem, p, item);
  issue_step_loads<kHeadDim, kBf16Grad>(smem, p, item, step, factors);
  hopper::async_copy_commit();
  KeyRowFactors key = load_key_factors(p, item, tile_row, window);

  KeyGradientState<kHeadDim> state;
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) {
    state.dv[i] = 0.0f;
    state.dk[i] = 0.0f;
  }
  state.dv_unit = RowExponentPair(0, 0);
  if constexpr (!kBf16Grad) smem.dk_units[threadIdx.x] = RowExponentPair(0, 0);

  hopper::async_copy_wait_all();
  finish_key_tiles<kHeadDim, kBf16Grad>(smem, p, item);
  finish_step_loads<kHeadDim, kBf16Grad>(smem, p, item, step, factors);
  if (item.packed && step.valid(item, p.causal != 0))  // (BF16grad never packs)
    set_packed_key_visibility(key, smem.query[step.stage], tile_row, p.causal != 0);
  if (threadIdx.x == 0) timeline::stamp(blockIdx.x, 1);
  if constexpr (timeline::kEnabled) {
    if (laps) timeline::lap_start();
  }
  OpeningProducts opening;  // kPipelinedOpening: the next step's products, in flight
  if constexpr (kPipelinedOpening<kHeadDim, kBf16Grad>)  // (stage 0: the first step's, if any)
    issue_opening_products<kHeadDim, kBf16Grad>(opening, smem, smem.stage[step.stage],
                                                warpgroup * kKeysPerWarpgroup);
  while (step.valid(item, p.causal != 0)) {
    const StepCursor next = step.next(p.group_size);
    issue_step_loads<kHeadDim, kBf16Grad>(smem, p, item, next, factors);
    hopper::async_copy_commit();
    KeyWarpgroupDq<kHeadDim, kBf16Grad> dq;
    backward_step<kHeadDim, kBf16Grad, kDebugPHat, kStaticScales>(
        p, item, smem, state, key, tile_row, step, unmasked.contains(step.q0), dq, opening, next);
    if constexpr (kBf16Grad)
      accumulate_dq<kHeadDim>(p, item, smem.query[step.stage], step, dq, window);
    finish_step_loads<kHeadDim, kBf16Grad>(smem, p, item, next, factors);
    if constexpr (timeline::kEnabled) {
      if (laps) timeline::lap(timeline::kStepLoads);
    }
    step = next;
  }
  // The opening products issued after the last step (on its stage, which the epilogue reuses).
  if constexpr (kPipelinedOpening<kHeadDim, kBf16Grad>) hopper::warpgroup_wait<0>();
  if (threadIdx.x == 0) timeline::stamp(blockIdx.x, 2);
  RowExponentPair dk_unit(0, 0);  // BF16grad: dK in units of 1
  if constexpr (!kBf16Grad) dk_unit = smem.dk_units[threadIdx.x];
  write_key_gradients<kHeadDim, kBf16Grad>(p, item, key, state, dk_unit, tile_row, smem);
  if (threadIdx.x == 0) {
    timeline::stamp(blockIdx.x, 3);
    if constexpr (timeline::kEnabled)
      for (int c = 0; c < timeline::kCounters; ++c)
        if (c != timeline::kHandOffFull) timeline::record_counter(blockIdx.x, timeline::Counter(c));
    timeline::record_place(blockIdx.x, key_tile_query_tiles(item, p.causal != 0) * p.group_size);
  }
}

}  // namespace flamia::backward
