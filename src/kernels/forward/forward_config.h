// Compile-time shape of the forward kernel: tiles, pipeline depth, roles and register budgets.
// The one place to tune them.
#pragma once

namespace flamia::forward {

// Thread roles: one producer warpgroup (TMA, per-key factors) and two consumer warpgroups, each
// owning 64 query rows of a 128-row tile.
constexpr int kWarpgroupThreads = 128;
constexpr int kConsumerWarpgroups = 2;
constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWarpgroups);
constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
constexpr int kProducerRegisters = 32;
constexpr int kConsumerRegisters = 232;

// The two consumers are not forced to alternate their MMAs (FlashAttention-3's ping-pong): with
// the intra-warpgroup overlap below it measured slower here (equal-2k 0.627 -> 0.656 ms).
constexpr int kRowsPerConsumer = 64;  // wgmma M
constexpr int kBlockM = kRowsPerConsumer * kConsumerWarpgroups;
constexpr int kMmaK = 32;  // FP8 wgmma K

template <int kHeadDim>
struct ForwardTile {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims with a forward kernel");
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockN = 128;  // keys per tile; V̂ᵀ rows are kBlockN bytes (128B swizzle)
  // K̂/V̂ᵀ ring depth: enough tiles in flight to cover TMA latency (smem: 16 KB per tile at D=128)
  static constexpr int kStages = kHeadDim == 128 ? 4 : 6;
  static constexpr int kQBuffers = 2;  // the next work item's Q̂ loads while this one runs
  static constexpr int kQkRowBytes = kHeadDim;  // Q̂ and K̂ rows: 64B or 128B swizzle
  static constexpr int kVtRowBytes = kBlockN;
  static constexpr int kQTileBytes = kBlockM * kHeadDim;
  static constexpr int kKTileBytes = kBlockN * kHeadDim;
  static constexpr int kVTileBytes = kHeadDim * kBlockN;
  static constexpr int kScoreRegisters = kBlockN / 2;  // m64nBN accumulator per thread
  static constexpr int kOutRegisters = kHeadDim / 2;   // m64nD accumulator per thread
};

// Per-key factors in shared memory, one record per pair of adjacent keys (the two columns a
// thread owns in each group of 8): {sk0, sk1, ev0, ev1} and {1/sv0, 1/sv1}.
struct alignas(32) KeyPairFactors {
  float key_scale[2];
  float value_exponent[2];
  float inv_value_scale[2];
  float unused[2];
};

}  // namespace flamia::forward
