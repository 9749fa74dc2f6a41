// Compile-time shape of the backward kernel: tiles, thread roles, MMA steps. The one place to
// tune them.
//
// One CTA per (KV head, 128-key tile of one document). Two consumer warpgroups each own 64 keys
// of the tile (wgmma M = 64): they hold the dK and dV accumulators of their keys in registers
// for the whole CTA, across every query tile and every query head of the KV group.
#pragma once

namespace flamia::backward {

constexpr int kWarpgroupThreads = 128;
constexpr int kConsumerWarpgroups = 2;                             // the key warpgroups
constexpr int kThreads = kWarpgroupThreads * kConsumerWarpgroups;  // they also issue the loads
constexpr int kWarpSize = 32;
constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / kWarpSize;

// The FP8 path adds a dQ warpgroup (threads kThreads ..): the key warpgroups hand it each step's
// y = dS 2^eq 2^ekc through shared memory (two buffers; the centered-key scales 2^ekc are the
// dQ warpgroup's, computed once per CTA), and it finds dQ's block scales, packs Ĝ in registers
// and runs dQ = Ĝ K̂c and the additions into the FP32 buffer on its own (dq_warpgroup.cuh).
// BF16grad keeps dQ in the key warpgroups.
constexpr int kDqWarpgroupThreads = kWarpgroupThreads;
template <bool kBf16Grad>
constexpr int kCtaThreads = kBf16Grad ? kThreads : kThreads + kDqWarpgroupThreads;
// Register budgets of the FP8 CTA (setmaxnreg), per head dim. The warpgroups trade registers
// within the CTA's launch allocation: 168 per thread (65536 / 384, rounded down to a multiple of
// 8), so the three budgets may sum to 3 x 168 = 504 at most (beyond it setmaxnreg.inc waits
// forever). The dQ warpgroup needs ~88 (below it ptxas spills and serializes its wgmma).
constexpr int kLaunchRegistersPerThread = 65536 / (kThreads + kDqWarpgroupThreads) / 8 * 8;
template <int kHeadDim>
struct Fp8RegisterBudget {
  static constexpr int kKeyWarpgroup = kHeadDim == 128 ? 208 : 184;
  static constexpr int kDqWarpgroup = kHeadDim == 128 ? 88 : 136;
  static_assert(kConsumerWarpgroups * kKeyWarpgroup + kDqWarpgroup <=
                    (kConsumerWarpgroups + 1) * kLaunchRegistersPerThread,
                "the CTA's register allocation");
};

// Head dim 64's FP8 key warpgroups issue the next step's products (Sᵀ and both halves of dPᵀ) at
// the end of their step, right after its hand-off and while its dV and dK still run, so that the
// tensor cores run them under the step's tail (the wait for dV and dK, the loads' barrier) and
// the next step starts with them landed or nearly so (backward_kernel.cuh, backward_step; backward
// kernel -4%). Head dim 128 has ~200 of its 208 registers live in the step: its variant (Sᵀ and
// dPᵀ's first half, issued once dV and dK have completed) spilled and measured 2-4% slower
// (session 24, docs/results-log.md), as did the other orders tried there.
template <int kHeadDim, bool kBf16Grad>
constexpr bool kPipelinedOpening = !kBf16Grad && kHeadDim == 64;

// The static kernels at head dim 128 sync the warp once inside an unmasked step's P̂ rebuild,
// before column group kRebuildLoadFence (rebuild_probabilities). That keeps ptxas from hoisting
// every group's factor loads to the top of the rebuild. Without the sync, the register peak
// there spilled 4 bytes per step once these kernels took the folded score gradient
// (score_gradient_half) as the others had. The folded form saves them 32 multiplies per step:
// static forward+backward 2-3.5% faster on an H100 (session 45). Group 7 since the descending
// query-tile order (session 46, query_pipeline.cuh): at group 6 its span-based step test left 8
// bytes of spills there, at 5 20 bytes. 0: no sync.
template <int kHeadDim, bool kStaticScales>
constexpr int kRebuildLoadFence = kHeadDim == 128 && kStaticScales ? 7 : 0;

// Head dim 128's key warpgroups take their warpgroup index as a warp-uniform value (broadcast from
// lane 0, hopper::warpgroup_index_uniform), so that ptxas builds the per-step wgmma descriptors
// of their key tiles in uniform registers: 30-45 fewer instructions per step (no R2UR copies),
// static forward+backward 3-4% faster on equal-8k, uniform and longtail (session 37).
// Head dim 64 keeps threadIdx.x's: its kernels measured 0.6-1.2% slower with it.
template <int kHeadDim>
constexpr bool kUniformKeyWarpgroup = kHeadDim == 128;

// Named barriers (0 is __syncthreads, which the FP8 CTA never uses: its roles never all meet).
enum NamedBarrier : int {
  kKeyWarpgroupsBarrier = 1,  // the key warpgroups (kThreads): a step's loads are in
  kScoreGradientFull = 2,     // + buffer: x written (key warpgroups arrive, dQ warpgroup waits)
  kScoreGradientEmpty = 4,    // + buffer: x read (dQ warpgroup arrives, key warpgroups wait)
  kDqWarpgroupBarrier = 6,    // the dQ warpgroup alone (the deterministic order)
};

// Keys per CTA: the 128-key tile-aligned block of dQ's dS scale (docs/numerics.md §5.7).
constexpr int kBlockN = 128;
constexpr int kKeysPerWarpgroup = kBlockN / kConsumerWarpgroups;  // wgmma M
// Queries per tile: the 64-query tile-aligned block of dK's dS scale (§5.8) and of dO''.
constexpr int kBlockM = 64;

constexpr int kFp8MmaK = 32;    // K of an FP8 wgmma (bytes)
constexpr int kBf16MmaK = 16;   // K of a BF16 wgmma (elements = 32 bytes)
constexpr int kMmaKBytes = 32;  // both: one k step advances a K-major operand by 32 bytes

// K-major tiles whose rows are longer than one 128-byte swizzle atom are stored as panels of
// 128-byte rows (a BF16 row of 128 elements = two panels).
constexpr int kPanelBytes = 128;
constexpr int kBf16PerPanel = kPanelBytes / 2;
constexpr int kTileAlignment = 1024;  // 128B-swizzle pattern period; tile bases sit on it

// Accumulator registers per thread of an m64nN wgmma.
constexpr int accumulator_registers(int n) {
  return n / 2;
}
constexpr int kScoreRegisters = accumulator_registers(kBlockM);  // Sᵀ, dPᵀ: m64n64

constexpr int kBytesPerVector = 16;  // cooperative loads move 16-byte vectors

template <int kHeadDim>
struct BackwardTile {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims with a backward kernel");
  static constexpr int kD = kHeadDim;
  static constexpr int kGradRegisters = accumulator_registers(kHeadDim);  // dK, dV: m64nD
  // dQ of a query tile: each warpgroup computes half of the head dim over all 128 keys.
  static constexpr int kDqColumns = kHeadDim / kConsumerWarpgroups;
  static constexpr int kDqRegisters = accumulator_registers(kDqColumns);
  static constexpr int kFp8RowBytes = kHeadDim;  // Q̂, K̂, V̂, dÔ rows: 64B or 128B swizzle
  static constexpr int kBf16Panels = kHeadDim / kBf16PerPanel;  // BF16 rows of D elements
};

// Head dim 64: the key warpgroups hand x = dS 2^eq over as it is, and the dQ warpgroup forms
// y = x 2^ekc_j as it reads the tile into registers (it holds the tile there, with registers to
// spare): the same bits (a product by a power of two), one multiply per score and two shared
// loads per step fewer in the key warpgroups, one more per score in the dQ warpgroup, which
// waits for them anyway. Head dim 128's dQ warpgroup (88 registers, the tile read twice) spilled
// 44-52 bytes with it (session 38).
template <int kHeadDim>
constexpr bool kDqAppliesKeyScale = kHeadDim == 64;

}  // namespace flamia::backward
