// An epilogue's output rows through shared memory: each warp writes its m16 slice of an
// accumulator (16 rows; a thread holds column pairs of rows lane / 4 and lane / 4 + 8) as BF16
// into a staging tile, then copies its rows out to global memory with 16-byte stores, whole rows
// per warp instruction (the forward's O, the backward's dK and dV). Rows of kRowElements BF16
// values, kRowElements * 2 bytes apart; the 16-byte chunks of row t sit at chunk ^ (t % 8), so a
// warp's stores of 8 rows hit distinct banks.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace flamia {

template <int kRowElements>
struct StagedRows {
  static constexpr int kRowBytes = kRowElements * 2;
  static constexpr int kChunkBytes = 16;
  static constexpr int kChunkElements = kChunkBytes / 2;
  static constexpr int kChunksPerRow = kRowBytes / kChunkBytes;
  static constexpr int kRowsPerWarp = 16;  // a warp's m16 slice
  static constexpr int kSwizzleRows = 8;
  static constexpr int kWarpLanes = 32;
  static constexpr int kRowsPerPass = kWarpLanes / kChunksPerRow;

  // Byte offset of chunk `chunk` of row `row` in the staging tile.
  __device__ __forceinline__ static int chunk_offset(int row, int chunk) {
    return row * kRowBytes + ((chunk ^ (row % kSwizzleRows)) * kChunkBytes);
  }
  // Two BF16 values at byte `byte` of chunk `chunk` of row `row` (a column pair: the chunk holds
  // columns 8 chunk .. 8 chunk + 7).
  __device__ __forceinline__ static void store_pair(uint8_t* tile, int row, int chunk, int byte,
                                                    float lo, float hi) {
    *reinterpret_cast<__nv_bfloat162*>(tile + chunk_offset(row, chunk) + byte) =
        __floats2bfloat162_rn(lo, hi);
  }
  // After the warp's pairs are stored: syncs the warp and calls copy(row, element, at) for each
  // 16-byte chunk of its rows warp_row0 .. warp_row0 + 15 (`element`: the chunk's first column,
  // `at`: its offset in the tile), each lane a chunk, consecutive lanes consecutive chunks.
  template <typename Copy>
  __device__ __forceinline__ static void copy_warp_rows(int warp_row0, int lane, Copy&& copy) {
    __syncwarp();
    const int chunk = lane % kChunksPerRow;
#pragma unroll
    for (int pass = 0; pass < kRowsPerWarp / kRowsPerPass; ++pass) {
      const int row = warp_row0 + pass * kRowsPerPass + lane / kChunksPerRow;
      copy(row, chunk * kChunkElements, chunk_offset(row, chunk));
    }
  }
};

}  // namespace flamia
