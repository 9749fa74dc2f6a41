// The backward's wgmma products by tile width: thin compile-time dispatch onto the generated
// wrappers (hopper/wgmma_ops.cuh), so that kernel code is written once for head dims 64 and 128.
// Every K-major operand advances 32 bytes per k step (FP8 k32 or BF16 k16).
#pragma once

#include <cstdint>

#include "kernels/backward/backward_config.h"
#include "kernels/hopper/sync.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace flamia::backward {

template <int kN>
__device__ __forceinline__ void mma_fp8_ss(float (&d)[kN / 2], uint64_t a, uint64_t b,
                                           int accumulate) {
  static_assert(kN == 32 || kN == 64 || kN == 128, "FP8 SS width");
  if constexpr (kN == 32) hopper::wgmma_fp8_ss_n32(d, a, b, accumulate);
  if constexpr (kN == 64) hopper::wgmma_fp8_ss_n64(d, a, b, accumulate);
  if constexpr (kN == 128) hopper::wgmma_fp8_ss_n128(d, a, b, accumulate);
}

// K step kk of an SS product: the first one starts D (kOverwrite: through the write-only wgmma,
// so that the compiler sees the old accumulator as dead where it is loop-carried), the others
// accumulate.
template <int kN, bool kOverwrite>
__device__ __forceinline__ void mma_fp8_ss_step(float (&d)[kN / 2], uint64_t a, uint64_t b,
                                                int kk) {
  if constexpr (kOverwrite) {
    static_assert(kN == 32 || kN == 64, "FP8 SS width with a write-only variant");
    if (kk == 0) {
      if constexpr (kN == 32) hopper::wgmma_fp8_ss_n32_overwrite(d, a, b);
      if constexpr (kN == 64) hopper::wgmma_fp8_ss_n64_overwrite(d, a, b);
      return;
    }
  }
  mma_fp8_ss<kN>(d, a, b, kk > 0);
}

template <int kN>
__device__ __forceinline__ void mma_fp8_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t b,
                                           int accumulate) {
  static_assert(kN == 32 || kN == 64 || kN == 128, "FP8 RS width");
  if constexpr (kN == 32) hopper::wgmma_fp8_rs_n32(d, a, b, accumulate);
  if constexpr (kN == 64) hopper::wgmma_fp8_rs_n64(d, a, b, accumulate);
  if constexpr (kN == 128) hopper::wgmma_fp8_rs_n128(d, a, b, accumulate);
}

// BF16 products with both operands K-major (no transposes).
template <int kN>
__device__ __forceinline__ void mma_bf16_ss(float (&d)[kN / 2], uint64_t a, uint64_t b,
                                            int accumulate) {
  static_assert(kN == 32 || kN == 64 || kN == 128, "BF16 SS width");
  if constexpr (kN == 32) hopper::wgmma_bf16_ss_n32<0, 0>(d, a, b, accumulate);
  if constexpr (kN == 64) hopper::wgmma_bf16_ss_n64<0, 0>(d, a, b, accumulate);
  if constexpr (kN == 128) hopper::wgmma_bf16_ss_n128<0, 0>(d, a, b, accumulate);
}

template <int kN>
__device__ __forceinline__ void mma_bf16_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t b,
                                            int accumulate) {
  static_assert(kN == 64 || kN == 128, "BF16 RS width");
  if constexpr (kN == 64) hopper::wgmma_bf16_rs_n64<0>(d, a, b, accumulate);
  if constexpr (kN == 128) hopper::wgmma_bf16_rs_n128<0>(d, a, b, accumulate);
}

// BF16 product with A M-major in shared memory (rows of A's K dimension, M contiguous) and B
// K-major.
template <int kN>
__device__ __forceinline__ void mma_bf16_ss_m_major(float (&d)[kN / 2], uint64_t a, uint64_t b,
                                                    int accumulate) {
  static_assert(kN == 32 || kN == 64, "BF16 SS width of dQ's half");
  if constexpr (kN == 32) hopper::wgmma_bf16_ss_n32<1, 0>(d, a, b, accumulate);
  if constexpr (kN == 64) hopper::wgmma_bf16_ss_n64<1, 0>(d, a, b, accumulate);
}

// BF16 product with A from registers and B N-major (rows of B's K dimension, N contiguous):
// the tile is stored as it sits in global memory, with no transpose.
template <int kN>
__device__ __forceinline__ void mma_bf16_rs_n_major(float (&d)[kN / 2], const uint32_t (&a)[4],
                                                    uint64_t b, int accumulate) {
  static_assert(kN == 64 || kN == 128, "BF16 RS width");
  if constexpr (kN == 64) hopper::wgmma_bf16_rs_n64<1>(d, a, b, accumulate);
  if constexpr (kN == 128) hopper::wgmma_bf16_rs_n128<1>(d, a, b, accumulate);
}

// Descriptor of an M- or N-major BF16 operand at k step `kk` of a tile of rows (K) stored as
// panels of 64 elements (M or N) by 128-byte swizzled rows, `panel_bytes` apart: a k16 step is
// 16 rows.
__device__ __forceinline__ uint64_t mn_major_desc(const uint8_t* tile, int panel_bytes, int kk) {
  return hopper::make_mn_major_desc(hopper::smem_addr(tile + kk * kBf16MmaK * kPanelBytes),
                                    uint32_t(panel_bytes));
}

// Descriptor of a K-major operand at k step `kk` of a tile stored as panels of 128-byte rows:
// panel kk / 4 (`panel_bytes` apart), 32 bytes per step inside the panel.
__device__ __forceinline__ uint64_t paneled_desc(const uint8_t* tile, int panel_bytes, int kk) {
  constexpr int kStepsPerPanel = kPanelBytes / kMmaKBytes;
  const uint8_t* panel = tile + (kk / kStepsPerPanel) * panel_bytes;
  return hopper::advance_desc(
      hopper::make_smem_desc(hopper::smem_addr(panel), hopper::Swizzle::k128B),
      (kk % kStepsPerPanel) * kMmaKBytes);
}

// Descriptor of a K-major FP8 tile whose rows are `kRowBytes` (64 or 128) long, at k step kk.
template <int kRowBytes>
__device__ __forceinline__ uint64_t fp8_desc(const uint8_t* tile, int kk) {
  static_assert(kRowBytes == 64 || kRowBytes == 128, "FP8 row width");
  constexpr hopper::Swizzle kSwizzle =
      kRowBytes == 128 ? hopper::Swizzle::k128B : hopper::Swizzle::k64B;
  return hopper::advance_desc(hopper::make_smem_desc(hopper::smem_addr(tile), kSwizzle),
                              kk * kMmaKBytes);
}

}  // namespace flamia::backward
