// The FP32 dQ buffer, where the backward's CTAs add their dQ partials and from which the post-pass
// converts dQ to BF16 (dq_accumulate.cuh). Layout: head-major rows padded to the pitch of the dQ
// warpgroup's staging tile (shared_storage.cuh), [Hq][total_q][kHeadDim + kDqRowPadding] floats.
// Consecutive queries of one head are then consecutive rows in both memories, so a warp adds
// its 16 staged rows with one bulk reduction (dq_warpgroup.cuh). The padding floats receive
// whatever the staging tile's padding holds and are never read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/fp8_numerics.h"

namespace flamia::backward {

constexpr int kDqRowPadding = 8;  // floats: the staging tile's conflict-free row pitch

FLAMIA_HD int dq_row_floats(int head_dim) {
  return head_dim + kDqRowPadding;
}

// Offset (in floats) of (head, token)'s row.
FLAMIA_HD int64_t dq_buffer_row(int head, int token, int total_q, int head_dim) {
  return (int64_t(head) * total_q + token) * dq_row_floats(head_dim);
}

inline size_t dq_buffer_bytes(int heads_q, int total_q, int head_dim) {
  return size_t(heads_q) * size_t(total_q) * size_t(dq_row_floats(head_dim)) * sizeof(float);
}

}  // namespace flamia::backward
