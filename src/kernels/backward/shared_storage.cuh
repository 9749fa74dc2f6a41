// Shared-memory layout of the backward CTA, one struct per precision path. Every operand tile
// starts on a 1024-byte boundary (the 128B-swizzle period) so that descriptors need no base
// offset; the struct itself is placed on such a boundary by the kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/backward/backward_config.h"
#include "kernels/backward/dq_buffer.h"
#include "kernels/backward/tile_factors.cuh"

namespace flamia::backward {

// Query-side tiles of one step (one 64-query tile of one query head). The CTA keeps
// kQueryStages of them: the copies of step s + 1 land in one while step s reads the other.
constexpr int kQueryStages = 2;

// precision fp8.
template <int kHeadDim>
struct Fp8QueryStage {
  static constexpr uint32_t kBytes = 4 * kBlockM * kHeadDim;         // the four tiles
  alignas(kTileAlignment) uint8_t q[kBlockM * kHeadDim];             // Q̂ rows (Sᵀ's B)
  alignas(kTileAlignment) uint8_t d_o[kBlockM * kHeadDim];           // dÔ rows (dPᵀ's B)
  alignas(kTileAlignment) uint8_t q_t[kHeadDim * kBlockM];           // Q̂ᵀ [d][query] (dK's B)
  alignas(kTileAlignment) uint8_t d_o_scaled_t[kHeadDim * kBlockM];  // dÔ''ᵀ (dV's B)
};

// precision fp8-bf16grad.
template <int kHeadDim>
struct Bf16GradQueryStage {
  alignas(kTileAlignment) uint8_t q[kBlockM * kHeadDim];             // Q̂ rows (Sᵀ's B)
  alignas(kTileAlignment) uint8_t d_o16[kBlockM * kHeadDim * 2];     // dO rows (dPᵀ's B)
  alignas(kTileAlignment) uint8_t q16[kBlockM * kHeadDim * 2];       // Q rows (dK's B, N-major)
  alignas(kTileAlignment) uint8_t d_o_scaled_t[kHeadDim * kBlockM];  // dÔ''ᵀ (dV's B)
};

// y = dS 2^eq_i 2^ekc_j of one step, FP32 [query][key], from the key warpgroups to the dQ warpgroup
// (dq_warpgroup.cuh). Rows are padded to 132 floats: the key warpgroups' scalar stores
// (a warp: 4 queries 2 apart x 8 consecutive keys) then fall on 32 different banks, and the dQ
// warpgroup's 16-byte loads (8 lanes: 2 queries x 64 bytes) conflict at most 2 ways.
constexpr int kScoreGradientRowFloats = kBlockN + 4;
struct ScoreGradientTile {
  alignas(128) float y[kBlockM][kScoreGradientRowFloats];
};
constexpr int kScoreGradientBuffers = 2;

// The dQ warpgroup's scaled dQ partial of one step, FP32 [query][d], from which the TMA unit adds
// each warp's rows to the FP32 dQ buffer (bulk reductions, dq_warpgroup.cuh). Rows are padded by
// 8 floats: a warp's float2 stores (8 rows x 4 lanes) then take the minimum two wavefronts. The
// dQ buffer's rows have the same pitch (dq_buffer.h).
template <int kHeadDim>
struct DqStagingTile {
  static constexpr int kRowFloats = kHeadDim + kDqRowPadding;
  alignas(128) float row[kBlockM][kRowFloats];
};

// The exponents of the thread's two key rows in one word (16 signed bits each; exponents of
// FP32 powers of two fit).
class RowExponentPair {
 public:
  RowExponentPair() = default;
  __device__ __forceinline__ RowExponentPair(int first, int second)
      : bits_((uint32_t(second) << 16) | (uint32_t(first) & 0xFFFFu)) {}
  __device__ __forceinline__ int operator[](int r) const {
    return r == 0 ? int(int16_t(bits_ & 0xFFFFu)) : int(bits_) >> 16;
  }

 private:
  uint32_t bits_;
};

// precision fp8: all five products in FP8.
template <int kHeadDim>
struct Fp8Storage {
  using QueryStage = Fp8QueryStage<kHeadDim>;
  // Key tile (loaded once per CTA).
  alignas(kTileAlignment) uint8_t k[kBlockN * kHeadDim];             // K̂ rows (Sᵀ's A)
  alignas(kTileAlignment) uint8_t v[kBlockN * kHeadDim];             // V̂ rows (dPᵀ's A)
  alignas(kTileAlignment) uint8_t k_centered_t[kHeadDim * kBlockN];  // K̂cᵀ [d][key] (dQ's B)
  QueryStage stage[kQueryStages];
  uint64_t query_full[kQueryStages];  // a stage's TMA copies have landed (query_pipeline.cuh)
  alignas(128) Fp8QueryFactors query[kQueryStages];  // TMA destinations too
  ScoreGradientTile score_gradient[kScoreGradientBuffers];
  alignas(16) float key_centered_scale[kBlockN];  // 2^ekc_j of the tile's keys (hand-off)
  DqStagingTile<kHeadDim> dq_staging;
  RowExponentPair dk_units[kThreads];  // the key warpgroups' dK row units (KeyGradientState)
};

// precision fp8-bf16grad: Sᵀ and dV in FP8; dPᵀ, dK and dQ in BF16 from the BF16 inputs.
template <int kHeadDim>
struct Bf16GradStorage {
  using QueryStage = Bf16GradQueryStage<kHeadDim>;
  alignas(kTileAlignment) uint8_t k[kBlockN * kHeadDim];          // K̂ rows (Sᵀ's A)
  alignas(kTileAlignment) uint8_t v16[kBlockN * kHeadDim * 2];    // V rows (dPᵀ's A)
  alignas(kTileAlignment) uint8_t k16_t[kHeadDim * kBlockN * 2];  // Kᵀ [d][key] (dQ's B)
  QueryStage stage[kQueryStages];
  alignas(kTileAlignment) uint8_t ds16[kBlockM * kBlockN * 2];  // dS [key][query] (dQ's A, M-major)
  QueryFactors query[kQueryStages];
};

template <int kHeadDim, bool kBf16Grad>
using BackwardStorage =
    std::conditional_t<kBf16Grad, Bf16GradStorage<kHeadDim>, Fp8Storage<kHeadDim>>;

template <int kHeadDim, bool kBf16Grad>
constexpr size_t backward_smem_bytes() {
  // + alignment slack: dynamic shared memory is only guaranteed 16-byte aligned.
  return sizeof(BackwardStorage<kHeadDim, kBf16Grad>) + kTileAlignment;
}

// The largest configuration (BF16grad, hdim 128) must fit the 227 KB an sm_90 CTA may use.
constexpr size_t kMaxDynamicSharedBytes = 227 * 1024;
static_assert(backward_smem_bytes<128, true>() <= kMaxDynamicSharedBytes, "shared memory");
static_assert(backward_smem_bytes<128, false>() <= kMaxDynamicSharedBytes, "shared memory");

}  // namespace flamia::backward
