// The CTA's sequence of steps (query tile x query head of the KV group, the query tiles in
// descending order: StepCursor) and the two-stage
// pipeline of their loads: while step s runs its products on stage s % 2, the copies of step
// s + 1 land in stage (s + 1) % 2 and its query factors are in flight in registers.
//
//   prologue:  issue key tiles + step 0;  finish step 0 (wait, masks, factors, fence, barrier)
//   step s:    issue step s + 1;  products of step s;  finish step s + 1
//
// A stage is free for step s + 1's copies when step s begins: its last reader, step s - 1,
// waited for all of its wgmma and passed the barrier that ends finish().
//
// The FP8 path's four query tiles come by TMA, issued by thread 0 and completing on the stage's
// mbarrier (query_full); BF16grad's by cooperative cp.async copies. TMA copies whole boxes, so a
// tile that straddles the document holds a neighbour's tokens: the row-major tiles (Q̂, dÔ: the
// N side of Sᵀ and dPᵀ, whose columns of other documents the masks replace by zeros) keep them;
// the token-major ones (Q̂ᵀ, dÔ''ᵀ: the reduction side of dK and dV) are zeroed there byte by
// byte, so nothing of another document, not even a NaN, reaches a product.
#pragma once

#include <cstdint>

#include "kernels/hopper/async_copy.cuh"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_params.h"
#include "kernels/backward/shared_storage.cuh"
#include "kernels/backward/tile_factors.cuh"
#include "kernels/backward/tile_geometry.cuh"
#include "kernels/backward/tile_loads.cuh"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/tma.cuh"

namespace flamia::backward {

// One step: query tile q0 of query head `member` of the KV group. The CTA visits its query tiles
// from the last to the first that sees the key tile (the query heads of the group inside each):
// the CTAs of one document's key tiles then start on the same query tile and run through the
// same tiles together, so the tiles each loads (and the dQ rows each adds to) are still in L2
// when the others come to them. In the ascending order a key tile n tiles later started 2n query
// tiles (2n x group_size steps) ahead of the first, which at group size 8 put the CTAs' common
// tiles far apart in time: L2 hit rate 42%, 16 GB read from DRAM, against 91% and 1.7 GB for the
// same shape without GQA (equal-4k-gqa8's backward on an H100, session 46). Descending, that
// backward took 22% less time (forward+backward 17-20% less); the other workloads' forward+
// backward stayed within the run's spread, 0.955-1.018x (the span test of valid() adds ~50
// instructions per step).
// The cursor holds no bound: the kernel's head-dim-128 key warpgroups have no register to spare
// across the step loop (one more spilled 136 bytes), so valid() tests the tile against the
// item's span, whose fields stay live anyway.
struct StepCursor {
  int q0;
  int member;
  int stage;       // shared-memory stage of the step's tiles and factors
  uint32_t phase;  // parity of the stage's mbarrier phase for this step (uses of the stage, mod 2)

  // Whether q0 is one of the key tile's query tiles: inside the span and, causal, seeing the key
  // tile (query_tile_sees_key_tile, monotone in q0: every tile from the first that does to the
  // span's last does, so the descending walk ends at the first tile that does not).
  __device__ __forceinline__ bool valid(const KeyTileItem& item, bool causal) const {
    return q0 + kBlockM > item.span.q_start && query_tile_sees_key_tile(item, q0, causal);
  }
  __device__ __forceinline__ int head(const KeyTileItem& item, int group_size) const {
    return item.kv_head * group_size + member;
  }
  __device__ __forceinline__ StepCursor next(int group_size) const {
    const int next_stage = (stage + 1) % kQueryStages;
    StepCursor n{q0, member + 1, next_stage, next_stage == 0 ? phase ^ 1u : phase};
    if (n.member == group_size) {
      n.member = 0;
      n.q0 -= kBlockM;
    }
    return n;
  }
};

// The CTA's first step: the last query tile that sees the key tile (none: an invalid cursor).
__device__ __forceinline__ StepCursor first_step(const KeyTileItem& item, bool causal) {
  return StepCursor{last_query_tile(item, first_visible_query_tile(item, causal)), 0, 0, 0};
}

// ---- key tiles (once per CTA) ------------------------------------------------------------------

template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void issue_key_tiles(BackwardStorage<kHeadDim, kBf16Grad>& smem,
                                                const BackwardParams& p, const KeyTileItem& item) {
  const TokenRange keys{item.span.k_start, item.span.k_end};
  const int64_t pitch = int64_t(p.heads_kv) * kHeadDim;
  const int g = item.kv_head;
  Fp8RowsCopy<kBlockN, kHeadDim>::issue(smem.k, p.k + int64_t(g) * kHeadDim, pitch, item.key0,
                                        keys);
  if constexpr (kBf16Grad) {
    Bf16RowsCopy<kBlockN, kHeadDim>::issue(smem.v16, p.v16, g, item.key0, keys);
  } else {
    Fp8RowsCopy<kBlockN, kHeadDim>::issue(smem.v, p.v + int64_t(g) * kHeadDim, pitch, item.key0,
                                          keys);
    Fp8TokenMajorCopy<kHeadDim, kBlockN, /*permuted=*/false>::issue(
        smem.k_centered_t, p.k_centered_t + int64_t(g) * kHeadDim * p.padded_k, p.padded_k,
        item.key0, keys);
  }
}

// After async_copy_wait_all(). The BF16 Kᵀ transpose goes through registers (synchronously:
// it happens once per CTA). Ends with the proxy fence of the copies and masks (the first step's
// barrier publishes them).
template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void finish_key_tiles(BackwardStorage<kHeadDim, kBf16Grad>& smem,
                                                 const BackwardParams& p, const KeyTileItem& item) {
  const TokenRange keys{item.span.k_start, item.span.k_end};
  if constexpr (kBf16Grad) {
    Bf16TransposedCopy<kBlockN, kHeadDim> k_t;
    k_t.fetch(p.k16, item.kv_head, item.key0, keys);
    k_t.store(smem.k16_t);
  } else {
    Fp8TokenMajorCopy<kHeadDim, kBlockN, /*permuted=*/false>::mask_partial_groups(smem.k_centered_t,
                                                                                  item.key0, keys);
  }
  hopper::fence_proxy_async_shared();
}

// ---- query tiles (per step) --------------------------------------------------------------------

// The thread that issues the FP8 path's TMA copies and arms their mbarriers.
__device__ __forceinline__ bool issues_query_tma() {
  return threadIdx.x == 0;
}

// Once per CTA, before the first step's loads: the stages' mbarriers (one arrival: the issuing
// thread's expect_tx), published to the key warpgroups.
template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void init_query_pipeline(BackwardStorage<kHeadDim, kBf16Grad>& smem,
                                                    const BackwardParams& p) {
  if constexpr (!kBf16Grad) {
    if (issues_query_tma()) {
#pragma unroll
      for (int s = 0; s < kQueryStages; ++s) hopper::mbarrier_init(&smem.query_full[s], 1);
      hopper::fence_mbarrier_init();
      hopper::tma_prefetch_descriptor(&p.q_map);
      hopper::tma_prefetch_descriptor(&p.d_o_map);
      hopper::tma_prefetch_descriptor(&p.q_t_map);
      hopper::tma_prefetch_descriptor(&p.d_o_scaled_t_map);
      hopper::tma_prefetch_descriptor(&p.row_factors_map);
    }
    hopper::named_barrier_sync(kKeyWarpgroupsBarrier, kThreads);
  }
}

template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void issue_query_tiles(BackwardStorage<kHeadDim, kBf16Grad>& smem,
                                                  const BackwardParams& p, const KeyTileItem& item,
                                                  int stage_index, int head, int q0) {
  auto& stage = smem.stage[stage_index];
  if constexpr (kBf16Grad) {
    const TokenRange queries{item.span.q_start, item.span.q_end};
    const int64_t pitch = int64_t(p.heads_q) * kHeadDim;
    Fp8RowsCopy<kBlockM, kHeadDim>::issue(stage.q, p.q + int64_t(head) * kHeadDim, pitch, q0,
                                          queries);
    Fp8TokenMajorCopy<kHeadDim, kBlockM, /*permuted=*/true>::issue(
        stage.d_o_scaled_t, p.d_o_scaled_t + int64_t(head) * kHeadDim * p.padded_q, p.padded_q, q0,
        queries);
    Bf16RowsCopy<kBlockM, kHeadDim>::issue(stage.d_o16, p.d_o16, head, q0, queries);
    Bf16RowsCopy<kBlockM, kHeadDim>::issue(stage.q16, p.q16, head, q0, queries);  // dK's B
  } else {
    if (!issues_query_tma()) return;
    uint64_t* full = &smem.query_full[stage_index];
    hopper::mbarrier_arrive_expect_tx(full,
                                      Fp8QueryStage<kHeadDim>::kBytes + sizeof(Fp8QueryFactors));
    hopper::tma_load_3d(stage.q, &p.q_map, full, 0, head, q0);
    hopper::tma_load_3d(stage.d_o, &p.d_o_map, full, 0, head, q0);
    hopper::tma_load_2d(stage.q_t, &p.q_t_map, full, q0, head * kHeadDim);
    hopper::tma_load_2d(stage.d_o_scaled_t, &p.d_o_scaled_t_map, full, q0, head * kHeadDim);
    hopper::tma_load_2d(&smem.query[stage_index], &p.row_factors_map, full, q0,
                        head * kRowFactorFields);
  }
}

// After async_copy_wait_all() (and, FP8, the stage's mbarrier): the byte masks of the
// token-major tiles. BF16grad: by the threads that issued the copies, of the groups that
// straddle the document's ends (cp.async zero-filled the others); its Q rows need none: dK reads
// them N-major, as copied. FP8: every token outside the document, in tiles that straddle it,
// and those rows' visibility in the step's factors (copied as their own document's).
// Returns whether the thread wrote into the stage through the generic proxy (cp.async copies,
// masks), which wgmma and the stage's next TMA copies may touch only after a proxy fence.
template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ bool finish_query_tiles(BackwardStorage<kHeadDim, kBf16Grad>& smem,
                                                   int stage_index, const KeyTileItem& item,
                                                   int q0) {
  using TokenMajor = Fp8TokenMajorCopy<kHeadDim, kBlockM, /*permuted=*/true>;
  auto& stage = smem.stage[stage_index];
  const TokenRange queries{item.span.q_start, item.span.q_end};
  if constexpr (kBf16Grad) {
    TokenMajor::mask_partial_groups(stage.d_o_scaled_t, q0, queries);
    return true;
  } else if (q0 < queries.lo || q0 + kBlockM > queries.hi) {
    TokenMajor::mask_outside_tokens(stage.d_o_scaled_t, q0, queries);
    TokenMajor::mask_outside_tokens(stage.q_t, q0, queries);
    const int row = threadIdx.x;
    if (row < kBlockM && (q0 + row < queries.lo || q0 + row >= queries.hi))
      smem.query[stage_index].visibility[row] = kQueryOutside;
    return true;
  }
  return false;  // TMA's copies alone: visible after the mbarrier wait, no fence needed
}

// ---- one stage ---------------------------------------------------------------------------------

// Issues the copies of `step` (FP8: its factors come with them) and, BF16grad, fetches its
// factors (into its stage and `factors`).
template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void issue_step_loads(BackwardStorage<kHeadDim, kBf16Grad>& smem,
                                                 const BackwardParams& p, const KeyTileItem& item,
                                                 const StepCursor& step,
                                                 QueryFactorFetch& factors) {
  if (!step.valid(item, p.causal != 0)) return;
  const int head = step.head(item, p.group_size);
  issue_query_tiles<kHeadDim, kBf16Grad>(smem, p, item, step.stage, head, step.q0);
  if constexpr (kBf16Grad) factors.fetch(smem.query[step.stage], p, item, head, step.q0);
}

// Completes `step`'s stage: waits for this thread's copies, patches them, writes the factors
// (BF16grad), and publishes everything to the key warpgroups (and to wgmma) with their barrier,
// after a proxy fence where the thread wrote the stage through the generic proxy (every BF16grad
// step; FP8: tiles that straddle the document). The barrier also ends the previous step: every
// reader of its stage is done after it (the dQ warpgroup reads no query stage).
template <int kHeadDim, bool kBf16Grad>
__device__ __forceinline__ void finish_step_loads(BackwardStorage<kHeadDim, kBf16Grad>& smem,
                                                  const BackwardParams& p, const KeyTileItem& item,
                                                  const StepCursor& step,
                                                  const QueryFactorFetch& factors) {
  hopper::async_copy_wait_all();
  if (step.valid(item, p.causal != 0)) {
    if constexpr (!kBf16Grad) hopper::mbarrier_wait(&smem.query_full[step.stage], step.phase);
    if (finish_query_tiles<kHeadDim, kBf16Grad>(smem, step.stage, item, step.q0))
      hopper::fence_proxy_async_shared();
    if constexpr (kBf16Grad) factors.store(smem.query[step.stage], p, item, step.q0);
  }
  hopper::named_barrier_sync(kKeyWarpgroupsBarrier, kThreads);
}

}  // namespace flamia::backward
