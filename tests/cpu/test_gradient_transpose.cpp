// The byte transpose of dQ's operand Ĝ (kernels/backward/gradient_transpose.h), run on a simulated
// warp: every lane's word after the two shuffle stages must hold the 4 consecutive keys of one
// query that the lane then stores, in key order.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "kernels/backward/gradient_transpose.h"

namespace flamia::backward {
namespace {

constexpr int kLanes = 32;
constexpr int kRowsPerWarp = 16;

// Host twin of __byte_perm: byte n of the result is byte (selector nibble n & 7) of {x, y}.
uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t selector) {
  const uint64_t both = (uint64_t(y) << 32) | x;
  uint32_t out = 0;
  for (int n = 0; n < 4; ++n) {
    const int from = (selector >> (4 * n)) & 7;
    out |= uint32_t((both >> (8 * from)) & 0xFF) << (8 * n);
  }
  return out;
}

// A byte that names its accumulator element (row 0..15 of the warp, column 0..7 of the group).
uint8_t tag(int row, int col) {
  return uint8_t(row * 8 + col);
}

TEST(GradientTranspose, EveryLaneEndsWithFourConsecutiveKeysOfOneQuery) {
  using T = GradientWordTranspose;
  std::array<uint32_t, kLanes> own{}, halves{}, word{};
  for (int lane = 0; lane < kLanes; ++lane) {
    const int row = lane / 4, col = 2 * (lane % 4);  // the accumulator's fragment layout
    own[lane] = uint32_t(tag(row, col)) | uint32_t(tag(row, col + 1)) << 8 |
                uint32_t(tag(row + 8, col)) << 16 | uint32_t(tag(row + 8, col + 1)) << 24;
  }
  for (int lane = 0; lane < kLanes; ++lane)
    halves[lane] = byte_perm(own[lane], own[lane ^ T::kStage1LaneXor],
                             T::halves_selector(T::row_in_quad(lane)));
  for (int lane = 0; lane < kLanes; ++lane)
    word[lane] = byte_perm(halves[lane], halves[lane ^ T::kStage2LaneXor],
                           T::bytes_selector(T::row_in_quad(lane)));

  std::array<int, kRowsPerWarp * 8> written{};  // every element stored exactly once
  for (int lane = 0; lane < kLanes; ++lane) {
    const int i = T::row_in_quad(lane);
    const int query = 2 * (lane % 4) + T::query_offset(i);
    const int key0 = lane / 4 + T::key_offset(i);
    ASSERT_GE(key0, 0);
    ASSERT_LE(key0 + 3, kRowsPerWarp - 1);
    ASSERT_EQ(key0 % 4, 0) << "a 4-byte aligned word";
    for (int b = 0; b < 4; ++b) {
      EXPECT_EQ((word[lane] >> (8 * b)) & 0xFF, tag(key0 + b, query))
          << "lane " << lane << " byte " << b;
      ++written[(key0 + b) * 8 + query];
    }
  }
  for (int n : written) EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace flamia::backward
