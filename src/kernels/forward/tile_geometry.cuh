// Where a work item's query tile and its key tiles lie in the packed tensors.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/forward/document_packing.h"

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
  int causal_from;  // first key tile that needs the causal mask (n_tiles if none); kWindowed:
                    // a sliding window starts some row's keys inside the visited tiles, so every
                    // tile takes the per-row key ranges (the segments' masks)
  int first_doc;    // the item's documents: [first_doc, first_doc + doc_count)
  int doc_count;    // > 1: a segment; each row sees only its own document's keys
  static constexpr int kWindowed = -1;
};

// Key tiles needed by the query rows [q0, q0 + rows) of a document, and the first that crosses
// the causal diagonal. Keys before k_start (in the first tile) are masked by their factors.
template <int kBlockN>
FLAMIA_HD void key_tile_range(int q0, int rows, int q_len, int k_start, int k_len, bool causal,
                              int* n_tiles, int* causal_from) {
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

// A causal document's sliding window of `window` keys (flamia.h; 0: none): row r (local) sees the
// keys [r - window + 1, r]. The item's key tiles then start at the one holding its first row's
// first key (k_tile_base moves there, so tile 0 is the first visited; bases stay multiples of
// 16), and it needs per-row lower bounds when its last row's window starts after the first key
// it visits.
template <int kBlockN>
FLAMIA_HD void apply_sliding_window(TileGeometry& g, int rows, int window) {
  if (window <= 0 || g.n_tiles == 0) return;
  const int lead = g.k_start - g.k_tile_base;  // keys of the previous document in tile 0
  const int first_key = sliding_window_first_key(g.q0, window);
  const int last_row = (g.q0 + rows < g.q_len ? g.q0 + rows : g.q_len) - 1;
  const int last_first_key = last_row - window + 1;
  const int skip = (first_key + lead) / kBlockN;
  g.k_tile_base += skip * kBlockN;
  g.n_tiles -= skip;
  g.causal_from = g.causal_from > skip ? g.causal_from - skip : 0;
  const int first_visited = g.k_tile_base > g.k_start ? g.k_tile_base - g.k_start : 0;
  if (last_first_key > first_visited) g.causal_from = TileGeometry::kWindowed;
}

// A row's visible keys in a document item (relative to k_start): causal up to the row, from the
// window's first key when there is a window.
FLAMIA_HD RowKeyRange document_row_keys(int row_local, int window) {
  return {sliding_window_first_key(row_local, window), row_local};
}

// Key tiles of an item that the query rows [q0 + row0, q0 + row0 + rows) see, counted from the
// item's first: in a causal document item the tiles up to the one holding their last row's own
// key (its later tiles are wholly masked for them: with 192-row tiles and 128-key tiles the
// first consumers' 64 rows end one tile early on half the diagonals); none when the rows lie
// past the document (the last tile of a document that does not fill it); all of them otherwise.
template <int kBlockN>
FLAMIA_HD int visible_key_tiles(const TileGeometry& g, int row0, int rows, bool causal) {
  const int first_row = g.q0 + row0;
  if (first_row >= g.q_len || g.n_tiles == 0) return 0;
  if (!causal || g.doc_count > 1) return g.n_tiles;
  const int last_row = (first_row + rows < g.q_len ? first_row + rows : g.q_len) - 1;
  const int tiles = (g.k_start - g.k_tile_base + last_row) / kBlockN + 1;
  return tiles < g.n_tiles ? tiles : g.n_tiles;
}

template <int kBlockM, int kBlockN>
FLAMIA_HD TileGeometry tile_geometry(const TileItem& item, const int32_t* cu_seqlens_q,
                                     const int32_t* cu_seqlens_k, bool causal, int window) {
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
  if (item.doc_count > 1)
    g.causal_from = 0;
  else if (causal)
    apply_sliding_window<kBlockN>(g, kBlockM, window);
  return g;
}

}  // namespace flamia::forward
