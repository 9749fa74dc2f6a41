// Where a work item's query tile and its key tiles lie in the packed tensors.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"

namespace flamia::forward {

// One work item for one query head: a query tile of one document, or (doc_count > 1) a
// segment of consecutive short documents sharing one tile (document_packing.h).
struct alignas(16) TileItem {
  int32_t doc;  // the (first) document
  int32_t head;
  int32_t m_block;
  int32_t doc_count;  // 1, or the documents of a segment
};

struct TileGeometry {
  int q_start;  // packed index of the document's (segment's) first query
  int q_len;
  int q0;       // first query row of the tile, relative to q_start
  int k_start;  // packed index of the document's (segment's) first key
  int k_len;
  int k_tile_base;  // floor16(k_start): key tiles start here (permuted V̂ᵀ groups)
  int n_tiles;      // key tiles this query tile visits
  int causal_from;  // first key tile that needs the causal mask (n_tiles if none)
  int first_doc;    // the item's documents: [first_doc, first_doc + doc_count)
  int doc_count;    // > 1: a segment; each row sees only its own document's keys
};

// Key tiles needed by the query rows [q0, q0 + rows) of a document, and the first that crosses
// the causal diagonal. Keys before k_start (in the first tile) are masked by their factors.
template <int kBlockN>
__host__ __device__ __forceinline__ void key_tile_range(int q0, int rows, int q_len, int k_start,
                                                        int k_len, bool causal, int* n_tiles,
                                                        int* causal_from) {
  const int lead = k_start - k_start / kPermutationGroup * kPermutationGroup;  // masked keys
  if (!causal) {
    *n_tiles = (k_len + lead + kBlockN - 1) / kBlockN;
    *causal_from = *n_tiles;
    return;
  }
  const int last_row = (q0 + rows < q_len ? q0 + rows : q_len) - 1;  // local index
  *n_tiles = last_row < 0 ? 0 : (last_row + lead) / kBlockN + 1;
  // Tile n holds local keys [n*BN - lead, n*BN - lead + BN - 1]; it needs the mask when its last
  // key lies beyond the tile's first row q0, i.e. for n*BN > q0 + lead - BN + 1.
  const int x = q0 + lead - kBlockN + 1;
  const int from = x < 0 ? 0 : x / kBlockN + 1;
  *causal_from = from < *n_tiles ? from : *n_tiles;
}

template <int kBlockM, int kBlockN>
__device__ __forceinline__ TileGeometry tile_geometry(const TileItem& item,
                                                      const int32_t* cu_seqlens_q,
                                                      const int32_t* cu_seqlens_k, bool causal) {
  TileGeometry g;
  g.first_doc = item.doc;
  g.doc_count = item.doc_count;
  const int end_doc = item.doc + item.doc_count;
  g.q_start = cu_seqlens_q[item.doc];
  g.q_len = cu_seqlens_q[end_doc] - g.q_start;
  g.k_start = cu_seqlens_k[item.doc];
  g.k_len = cu_seqlens_k[end_doc] - g.k_start;
  g.q0 = item.m_block * kBlockM;
  g.k_tile_base = g.k_start / kPermutationGroup * kPermutationGroup;
  // A segment visits all its keys, every tile with the per-row document mask.
  key_tile_range<kBlockN>(g.q0, kBlockM, g.q_len, g.k_start, g.k_len, causal && item.doc_count == 1,
                          &g.n_tiles, &g.causal_from);
  if (item.doc_count > 1) g.causal_from = 0;
  return g;
}

}  // namespace flamia::forward
