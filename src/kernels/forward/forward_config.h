// Compile-time shape of the forward kernel: tiles, pipeline depth, roles and register budgets.
// The one place to tune them.
#pragma once

#include <cstddef>

namespace flamia::forward {

// Thread roles: one producer warpgroup (TMA, per-key factors) and ForwardTile::kConsumerWarpgroups
// consumer warpgroups, each owning 64 query rows of the query tile.
constexpr int kWarpgroupThreads = 128;
constexpr int kRegisterFile = 65536;  // 32-bit registers per SM (one CTA per SM)

// The consumers are not forced to alternate their MMAs (FlashAttention-3's ping-pong): with the
// intra-warpgroup overlap it measured slower here (equal-2k 0.627 -> 0.656 ms), and in
// bench_forward_sol it gains nothing over the serial loop.
constexpr int kRowsPerConsumer = 64;  // wgmma M
constexpr int kMmaK = 32;             // FP8 wgmma K

// kStaticScales: the tile of scale mode kStatic's kernels, whose softmax holds no per-key
// factors: at head dim 128 three consumer warpgroups fit its registers (they do not fit the
// per-key softmax's: below).
template <int kHeadDim, bool kStaticScaleMode = false>
struct ForwardTile {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims with a forward kernel");
  static constexpr int kD = kHeadDim;
  static constexpr bool kStaticScales = kStaticScaleMode;  // the consumers' softmax reads it
  // Consumers: the softmax is latency-bound (bench_forward_sol: two consumer warps per scheduler
  // leave the tensor cores, the MUFU and the issue slots each mostly idle), so more consumer
  // warps help where their registers fit: three at head dim 64 (192-row query tiles; +33% in
  // bench_forward_sol, -26% forward time on longtail-d64-gqa), two at 128 for the per-key
  // softmax: with three its consumers spill within the 160 registers 512 threads leave (the
  // per-key factors' loads in flight beside 64 score and 68 accumulator registers; measured
  // 20-28% slower with the spills, session 29). Scale mode kStatic's softmax reads no per-key
  // factors: three consumers at 160 registers beside a 32-register producer, no spills, the
  // forward 19-22% faster end to end than exact's (session 29). setmaxnreg only moves
  // registers inside the CTA's launch allocation (kRegisterFile / kThreads per thread, in steps
  // of 8).
  static constexpr int kConsumerWarpgroups = kHeadDim == 64 || kStaticScales ? 3 : 2;
  static constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWarpgroups);
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
  static constexpr int kProducerRegisters = kHeadDim == 64 ? 56 : kStaticScales ? 32 : 40;
  static constexpr int kConsumerRegisters = kHeadDim == 64 ? 144 : kStaticScales ? 160 : 232;
  static_assert(kProducerRegisters + kConsumerWarpgroups * kConsumerRegisters <=
                    (1 + kConsumerWarpgroups) * (kRegisterFile / kThreads / 8 * 8),
                "register split within the launch allocation");
  // Scale mode kStatic without a window: at head dim 64 its consumers spilled 8 bytes within 144
  // registers; beside the 56-register producer they get the whole allocation.
  static constexpr int kStaticConsumerRegisters = kHeadDim == 64 ? 152 : kConsumerRegisters;
  static_assert(kProducerRegisters + kConsumerWarpgroups * kStaticConsumerRegisters <=
                    (1 + kConsumerWarpgroups) * (kRegisterFile / kThreads / 8 * 8),
                "register split within the launch allocation");
  // The sliding-window kernel's producer also moves each item's key tiles to the window's first
  // (tile_geometry.cuh): at head dim 64 it spilled 44 bytes within 56 registers.
  static constexpr int kWindowedProducerRegisters = kHeadDim == 64 ? 64 : kProducerRegisters;
  static_assert(kWindowedProducerRegisters + kConsumerWarpgroups * kConsumerRegisters <=
                    (1 + kConsumerWarpgroups) * (kRegisterFile / kThreads / 8 * 8),
                "register split within the launch allocation");
  // With fused quantization (head dim 128 only: at 64 its consumers spilled) the producer
  // converts BF16 rows itself (fused_quantize.cuh).
  static constexpr int kFusedProducerRegisters = 72;
  static constexpr int kFusedConsumerRegisters = 216;
  static_assert(kHeadDim != 128 || kStaticScales ||
                    kFusedProducerRegisters + kConsumerWarpgroups * kFusedConsumerRegisters <=
                        (1 + kConsumerWarpgroups) * (kRegisterFile / kThreads / 8 * 8),
                "register split within the launch allocation");
  static constexpr int kBlockM = kRowsPerConsumer * kConsumerWarpgroups;  // query rows per tile
  // The staged epilogue alternates two slots of BF16 O tiles; where two do not fit in shared
  // memory (head dim 128 with three consumers) one O tile spans both slots.
  static constexpr int kOutputStagingSlots = kHeadDim == 128 && kConsumerWarpgroups == 3 ? 1 : 2;
  // Keys per tile: wide tiles amortize the per-tile softmax overheads (row reductions, offsets,
  // barriers); bounded by registers (S is kBlockN / 2 per thread) and shared memory.
  // (160/192-key tiles spilled with the current register budgets; 128 for both head dims.)
  static constexpr int kBlockN = 128;
  // Every kPolynomialExpEvery-th group of 8 key columns is exponentiated on the FMA pipe
  // (exp2_polynomial) instead of the MUFU, whose 8 cycles per warp instruction match the tensor
  // cores' time per score at head dim 128 (bench_forward_sol, two consumers: 614 -> 713 TFLOP/s
  // with a quarter of the columns). Head dim 64's three consumers lose with it (471 -> 444), and
  // so do scale mode kStatic's tiles, whose softmax is one FFMA and one exponential per score
  // (session 30, forward end to end: a quarter at head dim 128 +5 to +15%, ab_static_fma.json;
  // an eighth +5%, and at head dim 64 a quarter, a third or half +6 to +25%, ab_static_poly.json).
  // FLAMIA_STATIC_POLYNOMIAL_EVERY sets the static tiles' share for such A/Bs.
#ifndef FLAMIA_STATIC_POLYNOMIAL_EVERY
#define FLAMIA_STATIC_POLYNOMIAL_EVERY 0
#endif
  static constexpr int kPolynomialExpEvery = kStaticScales     ? FLAMIA_STATIC_POLYNOMIAL_EVERY
                                             : kHeadDim == 128 ? 4
                                                               : 0;
  // K̂/V̂ᵀ ring depth (shared memory: K̂ + V̂ᵀ = 32 KB per stage at D=128, 16 KB at D=64).
  static constexpr int kStages = kHeadDim == 128 ? 3 : 4;
  static constexpr int kQBuffers = 2;  // the next work item's Q̂ loads while this one runs
  static constexpr int kQkRowBytes = kHeadDim;  // Q̂ and K̂ rows: 64B or 128B swizzle
  // V̂ᵀ tiles ([D][keys], keys contiguous) are loaded as sub-tiles of at most 128 keys (rows of
  // 128 bytes, the widest swizzle); a last narrower sub-tile uses the 64B or 32B swizzle.
  static constexpr int kVtSubtileKeys = 128;
  static constexpr int kVtSubtiles = (kBlockN + kVtSubtileKeys - 1) / kVtSubtileKeys;
  static constexpr int kVtTailKeys = kBlockN - (kVtSubtiles - 1) * kVtSubtileKeys;
  static_assert(kVtTailKeys == 128 || kVtTailKeys == 64 || kVtTailKeys == 32, "sub-tile keys");
  // The P̂·V̂ product also computes the row sums l (numerics §4 step 5): each V̂ᵀ sub-tile is
  // followed by kRowSumColumns rows holding 2^(ev_ref - ev_j) per key (written by the producer),
  // so the MMA's last 8 columns are Σ_j P̂_ij 2^(ev_ref - ev_j) (all 8 equal).
  static constexpr int kRowSumColumns = 8;                          // the smallest wgmma N step
  static constexpr int kOutputColumns = kHeadDim + kRowSumColumns;  // N of the P̂·V̂ wgmma
  static constexpr int kVtSubtileBytes = kOutputColumns * kVtSubtileKeys;
  static_assert(kVtSubtileBytes % 1024 == 0, "sub-tiles stay 1024-byte aligned (128B swizzle)");
  static constexpr int kQTileBytes = kBlockM * kHeadDim;
  static constexpr int kKTileBytes = kBlockN * kHeadDim;
  static constexpr int kVTileBytes = kHeadDim * kBlockN;  // bytes a V̂ᵀ tile's TMA loads
  static constexpr int kScoreRegisters = kBlockN / 2;     // m64nBN accumulator per thread
  static constexpr int kOutRegisters = kHeadDim / 2;      // O columns of the accumulator
  static constexpr int kAccumulatorRegisters = kOutputColumns / 2;  // O, then the row sums
};

// Whether the persistent CTAs take their items after the first from the plan's global counter
// (ScheduleView::item_counter: the producer's TMA thread takes the next index as an item starts,
// one atomic per item) instead of by the grid's stride. Measured (session 36, forward end to end
// against the stride, best of two rounds, three A/Bs): equal-2k -2 to -3%, mixed-tiny-and-8k
// -6% static / -8% exact, the 4k-8k-token workloads at head dim 128 within -2 to +1.5%; at head
// dim 64 +0.6 to +1.7%, so that head dim keeps the stride (and its kernels their session-35
// code). The fused-quantize producer takes the stride but hands its items over the same way.
template <int kHeadDim>
constexpr bool kDynamicItems = kHeadDim == 128;

// One byte of a row-sum row: e4m3 holds the powers of two 2^-9 .. 2^8 exactly, so a key whose
// value exponent lies within this window around the tile's reference key is summed by the MMA;
// one outside it gets 0 there and is added by the consumers in FP32 (the rare fallback).
constexpr int kRowSumMinExponent = -9;
constexpr int kRowSumMaxExponent = 8;

// Per-key factors in shared memory, one record per pair of adjacent keys (the two columns a
// thread owns in each group of 8): {sk0, sk1, ev0, ev1} and {1/sv0, 1/sv1, fallback0, fallback1};
// fallback_inv_value_scale is 2^-ev for a key outside the row-sum rows' exponent window, else 0.
struct alignas(32) KeyPairFactors {
  float key_scale[2];
  float value_exponent[2];
  float inv_value_scale[2];
  float fallback_inv_value_scale[2];
};
// online_softmax.cuh reads {key_scale, value_exponent} as one 16-byte load.
static_assert(offsetof(KeyPairFactors, value_exponent) == 2 * sizeof(float) &&
                  alignof(KeyPairFactors) >= 16,
              "key_scale and value_exponent form the record's first 16 bytes");

}  // namespace flamia::forward
