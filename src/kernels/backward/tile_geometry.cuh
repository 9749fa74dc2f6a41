// Where a backward CTA's key tile and its query tiles lie in the packed tensors, and the
// visibility rule of one (key, query) pair.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_params.h"

namespace flamia::backward {

__host__ __device__ __forceinline__ int floor_to_group(int token) {
  return token / kPermutationGroup * kPermutationGroup;
}

struct DocumentSpan {
  int q_start, q_end;  // packed query rows [q_start, q_end)
  int k_start, k_end;  // packed key rows [k_start, k_end)
};

// The CTA's work item: document, key tile of that document, KV head.
struct KeyTileItem {
  int doc;
  int kv_head;
  DocumentSpan span;
  int key0;  // first key row of the tile: floor16(k_start) + tile * kBlockN
};

__device__ __forceinline__ KeyTileItem key_tile_item(const BackwardParams& p) {
  KeyTileItem item;
  // Key tiles of one (document, KV head) have consecutive block indices in increasing order:
  // the deterministic dQ ordering waits only on lower-indexed (earlier dispatched) CTAs.
  item.doc = blockIdx.x / p.key_tiles_per_doc;
  const int tile = blockIdx.x % p.key_tiles_per_doc;
  item.kv_head = blockIdx.y;
  item.span.q_start = p.cu_seqlens_q[item.doc];
  item.span.q_end = p.cu_seqlens_q[item.doc + 1];
  item.span.k_start = p.cu_seqlens_k[item.doc];
  item.span.k_end = p.cu_seqlens_k[item.doc + 1];
  item.key0 = floor_to_group(item.span.k_start) + tile * kBlockN;
  return item;
}

__device__ __forceinline__ bool key_tile_is_empty(const KeyTileItem& item) {
  return item.span.k_end <= item.span.k_start || item.key0 >= item.span.k_end;
}

// Visibility by index comparison: key j is visible to query i iff key_index(j) <= query_index(i).
// Causal documents compare document-local positions (j - k_start <= i - q_start); rows and keys
// outside the document get indices that never compare visible.
constexpr int kKeyOutside = 0x3FFFFFFF;
constexpr int kQueryOutside = -1;
constexpr int kQuerySeesAll = kKeyOutside - 1;

__device__ __forceinline__ int key_visibility_index(const DocumentSpan& s, int j, bool causal) {
  if (j < s.k_start || j >= s.k_end) return kKeyOutside;
  return causal ? j - s.k_start : 0;
}
__device__ __forceinline__ int query_visibility_index(const DocumentSpan& s, int i, bool causal) {
  if (i < s.q_start || i >= s.q_end) return kQueryOutside;
  return causal ? i - s.q_start : kQuerySeesAll;
}

// Causal: a query tile whose last row lies before the key tile's first key sees nothing of it.
__device__ __forceinline__ bool query_tile_sees_key_tile(const KeyTileItem& item, int q0,
                                                         bool causal) {
  if (!causal) return true;
  const int last_q = min(q0 + kBlockM, item.span.q_end) - 1;
  const int first_k = max(item.key0, item.span.k_start);
  return last_q - item.span.q_start >= first_k - item.span.k_start;
}

}  // namespace flamia::backward
