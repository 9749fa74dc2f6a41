// The 4 x 4 byte transpose that turns dQ's operand Ĝ from the accumulator's orientation (rows =
// keys) into 4-byte words of 4 consecutive keys of one query (score_gradient.cuh,
// store_query_gradient_operand). Plain integer rules shared by the kernel and a CPU test.
//
// The lanes lane ^ 4 and lane ^ 8 of a lane hold the 4 consecutive accumulator rows (keys) r0 ..
// r0 + 3 of its 16-row warp slice (lane / 4 = row, r0 = row & ~3) and the same column pair (c,
// c + 1). Each packs the word {(r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1)} (byte 0 first);
// stage 1 exchanges 16-bit halves with lane ^ 8, stage 2 bytes with lane ^ 4; lane i = (lane /
// 4) % 4 then holds query c + (i & 1), keys r0 + 8 (i >> 1) .. + 3.
#pragma once

#include <cstdint>

namespace flamia::backward {

struct GradientWordTranspose {
  static constexpr int kStage1LaneXor = 8;  // partner of stage 1 (row i ^ 2)
  static constexpr int kStage2LaneXor = 4;  // partner of stage 2 (row i ^ 1)

  // The lane's row among r0 .. r0 + 3.
  static constexpr int row_in_quad(int lane) { return (lane / 4) % 4; }
  // __byte_perm selectors (bytes 0-3: own word, 4-7: the partner's).
  static constexpr uint32_t halves_selector(int i) {
    return (i & 2) ? 0x3276u : 0x5410u;  // {p2, p3, o2, o3} : {o0, o1, p0, p1}
  }
  static constexpr uint32_t bytes_selector(int i) {
    return (i & 1) ? 0x3715u : 0x6240u;  // {p1, o1, p3, o3} : {o0, p0, o2, p2}
  }
  // The lane's word after the transpose: query = c + query_offset, first key = key(row) +
  // key_offset.
  static constexpr int query_offset(int i) { return i & 1; }
  static constexpr int key_offset(int i) { return -i + 8 * (i >> 1); }
};

}  // namespace flamia::backward
