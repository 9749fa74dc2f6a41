// Warpgroup MMA (wgmma) plumbing for sm_90a: shared-memory descriptors, ordering, and the
// generated per-shape wrappers (wgmma_ops.cuh). Facts: ../shared/notes/hopper-fp8-facts.md.
#pragma once

#include <cstdint>

#include "kernels/hopper/wgmma_ops.cuh"

namespace flamia::hopper {

// Swizzle modes of a K-major operand tile whose rows are 32, 64 or 128 bytes long.
enum class Swizzle : int { k32B = 3, k64B = 2, k128B = 1 };

__host__ __device__ constexpr int swizzle_row_bytes(Swizzle s) {
  return s == Swizzle::k128B ? 128 : (s == Swizzle::k64B ? 64 : 32);
}

// Byte offset of (row, byte) in a K-major tile with rows of `kRowBytes` bytes, swizzled the way
// TMA's SWIZZLE_{32,64,128}B writes it (16-byte chunks XOR-ed with the row index within a
// group of 8 rows).
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int byte) {
  static_assert(kRowBytes == 32 || kRowBytes == 64 || kRowBytes == 128, "swizzle atom");
  constexpr int kChunks = kRowBytes / 16;
  // The XOR pattern repeats every 1024 bytes: address bits [4, 4+log2(kChunks)) ^= bits [7, ...).
  constexpr int kRowShift = kRowBytes == 128 ? 0 : (kRowBytes == 64 ? 1 : 2);
  const int chunk = (byte >> 4) ^ ((row >> kRowShift) & (kChunks - 1));
  return uint32_t(row * kRowBytes + (chunk << 4) + (byte & 15));
}

// Descriptor of a K-major tile at shared address `smem_addr` (1024-byte aligned tile base for
// 128B swizzle), rows of swizzle_row_bytes(s) bytes; 8-row groups `8 * row_bytes` apart.
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, Swizzle s) {
  const uint64_t row_group_bytes = 8u * swizzle_row_bytes(s);
  uint64_t desc = uint64_t((smem_addr & 0x3FFFF) >> 4);
  desc |= uint64_t(1) << 16;                     // leading byte offset: unused for swizzled K-major
  desc |= uint64_t(row_group_bytes >> 4) << 32;  // stride byte offset
  desc |= uint64_t(int(s)) << 62;
  return desc;
}
// Descriptor of an MN-major (transposed: wgmma's imm-trans flag set; 16-bit types only) tile at
// `smem_addr` with 128B swizzle: MN runs along the 128-byte swizzled rows (64 BF16 elements), K
// down the rows. PTX's canonical layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): the leading byte
// offset is the distance between blocks of 64 MN elements (`mn_block_bytes`), the stride byte
// offset that between groups of 8 K-rows (8 x 128 B). A k16 step advances 16 rows (2 groups).
__device__ __forceinline__ uint64_t make_mn_major_desc(uint32_t smem_addr,
                                                       uint32_t mn_block_bytes) {
  constexpr uint32_t kRowBytes = 128;
  constexpr uint32_t kRowGroupBytes = 8 * kRowBytes;
  uint64_t desc = uint64_t((smem_addr & 0x3FFFF) >> 4);
  desc |= uint64_t((mn_block_bytes & 0x3FFFF) >> 4) << 16;  // leading byte offset
  desc |= uint64_t(kRowGroupBytes >> 4) << 32;              // stride byte offset
  desc |= uint64_t(int(Swizzle::k128B)) << 62;
  return desc;
}
// Advancing a descriptor by `bytes` along K inside the swizzle atom.
__device__ __forceinline__ uint64_t advance_desc(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

__device__ __forceinline__ void warpgroup_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void warpgroup_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void warpgroup_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across the async window.
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// FP32 accumulator layout of an m64nN wgmma (verified): register i of thread (warp w, lane l).
__device__ __forceinline__ int accumulator_row(int warp, int lane, int i) {
  return 16 * warp + lane / 4 + 8 * ((i >> 1) & 1);
}
__device__ __forceinline__ int accumulator_col(int lane, int i) {
  return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
}

}  // namespace flamia::hopper
