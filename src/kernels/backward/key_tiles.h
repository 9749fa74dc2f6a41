// Where a backward CTA's key tile and its query tiles lie in the packed tensors, the visibility
// rule of one (key, query) pair, and which steps need masks: host/device (FLAMIA_HD), so that the
// CPU tests check them against a brute-force enumeration (tests/cpu/test_backward_tiles.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/sliding_window.h"
#include "kernels/backward/backward_config.h"

namespace flamia::backward {

FLAMIA_HD int floor_to_group(int token) {
  return token / kPermutationGroup * kPermutationGroup;
}

struct DocumentSpan {
  int q_start, q_end;  // packed query rows [q_start, q_end)
  int k_start, k_end;  // packed key rows [k_start, k_end)
};

// The CTA's work item: document, key tile of that document, KV head; or a run of packed short
// documents (below), whose span is the run's.
struct KeyTileItem {
  int doc;   // packed: the run's first document
  int tile;  // key tile index within the document (the deterministic dQ turn); packed: 0
  int kv_head;
  DocumentSpan span;
  int key0;  // first key row of the tile: floor16(k_start) + tile * kBlockN
  bool packed;
  int documents;  // packed: the run's documents; 1 otherwise
};

FLAMIA_HD KeyTileItem make_key_tile_item(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                         int doc, int tile, int kv_head) {
  KeyTileItem item;
  item.doc = doc;
  item.tile = tile;
  item.kv_head = kv_head;
  item.span.q_start = cu_seqlens_q[doc];
  item.span.q_end = cu_seqlens_q[doc + 1];
  item.span.k_start = cu_seqlens_k[doc];
  item.span.k_end = cu_seqlens_k[doc + 1];
  item.key0 = floor_to_group(item.span.k_start) + tile * kBlockN;
  item.packed = false;
  item.documents = 1;
  return item;
}

// A causal sliding window of `window` keys (flamia.h; 0: none): query row r (local) sees the keys
// [r - window + 1, r], so the rows past the tile's last key + window - 1 see none of the tile.
// The item's query span ends there: those rows are then outside it, as rows of another document
// would be (masked, never loaded into a product, no dQ written), and its steps stop before them.
FLAMIA_HD KeyTileItem with_sliding_window(KeyTileItem item, bool causal, int window) {
  if (!causal || window <= 0 || item.packed) return item;
  const int key_end = item.key0 + kBlockN < item.span.k_end ? item.key0 + kBlockN : item.span.k_end;
  const int64_t stop = int64_t(item.span.q_start) + (key_end - 1 - item.span.k_start) + window;
  if (stop < item.span.q_end) item.span.q_end = int(stop);
  return item;
}

// At most this many query tiles see one key tile under a sliding window of `window` keys: the
// rows from its first key to its last key + window - 1 span window + kBlockN - 1 rows, over at
// most that many / kBlockM + 1 tiles (the backward plan's cost cap).
FLAMIA_HD int sliding_window_query_tiles(int window) {
  return (window + kBlockN - 2) / kBlockM + 2;
}

// The first key tile of the document that query tile q0 sees: the one holding its first row's
// first visible key (tile 0 without a window). The deterministic dQ order starts there.
FLAMIA_HD int first_key_tile_seen(const KeyTileItem& item, int q0, bool causal, int window) {
  if (!causal || window <= 0 || item.packed) return 0;
  const int first_row = (q0 > item.span.q_start ? q0 : item.span.q_start) - item.span.q_start;
  const int first_key = sliding_window_first_key(first_row, window);
  const int lead = item.span.k_start - floor_to_group(item.span.k_start);
  return (first_key + lead) / kBlockN;
}

FLAMIA_HD bool key_tile_is_empty(const KeyTileItem& item) {
  return item.span.k_end <= item.span.k_start || item.key0 >= item.span.k_end;
}

// Key tile slots per document, from the longest document's keys: a document's tiles start at
// floor16(k_start), so up to kPermutationGroup - 1 keys of the previous document precede its
// first key in the first tile.
FLAMIA_HD int key_tiles_per_document(int max_seqlen_k) {
  return (max_seqlen_k + kPermutationGroup - 1 + kBlockN - 1) / kBlockN;
}

// The document's key tile `tile`, from its tile 0 (whose bounds hold the document's).
FLAMIA_HD KeyTileItem nth_key_tile(const KeyTileItem& first, int tile) {
  KeyTileItem item = first;
  item.tile = tile;
  item.key0 = first.key0 + tile * kBlockN;
  return item;
}

// A bound on the key tiles with keys, summed over the documents, from the host's totals: a
// document of len keys has ceil((k_end - floor16(k_start)) / kBlockN) tiles, and
// k_end - floor16(k_start) <= len + kPermutationGroup - 1, so at most
// 1 + floor((len + kPermutationGroup - 2) / kBlockN) of them (one for an empty document, which
// has none). Summed: batch + floor((total_k + batch (kPermutationGroup - 2)) / kBlockN), and no
// more than the batch * key_tiles_per_doc slots. The backward launches this many CTAs per KV
// head (backward_schedule.h places the tiles with keys first).
FLAMIA_HD int key_tiles_bound(int batch, int total_k, int key_tiles_per_doc) {
  const int64_t slots = int64_t(batch) * key_tiles_per_doc;
  const int64_t bound =
      batch + (int64_t(total_k) + int64_t(batch) * (kPermutationGroup - 2)) / kBlockN;
  return int(slots < bound ? slots : bound);
}

// Visibility by index comparison: key j is visible to query i iff
//   query_index(i) - key_index(j) lies in [0, window)
// (visible_pair). An ordinary CTA (one document) has the window kOrdinaryWindow, so the rule is
// key_index(j) <= query_index(i): causal documents compare document-local positions
// (j - k_start <= i - q_start); rows and keys outside the document get indices that never
// compare visible. Packed runs: packed_runs.h.
constexpr int kKeyOutside = 0x3FFFFFFF;
constexpr int kQueryOutside = -1;
constexpr int kQuerySeesAll = kKeyOutside - 1;
constexpr uint32_t kOrdinaryWindow = 0x80000000u;  // every difference of valid indices is < 2^31

FLAMIA_HD bool visible_pair(int key_index, int query_index, uint32_t window) {
  return uint32_t(query_index) - uint32_t(key_index) < window;
}

FLAMIA_HD int key_visibility_index(const DocumentSpan& s, int j, bool causal) {
  if (j < s.k_start || j >= s.k_end) return kKeyOutside;
  return causal ? j - s.k_start : 0;
}
FLAMIA_HD int query_visibility_index(const DocumentSpan& s, int i, bool causal) {
  if (i < s.q_start || i >= s.q_end) return kQueryOutside;
  return causal ? i - s.q_start : kQuerySeesAll;
}

// The query tiles whose steps need no per-element mask: every (key, query) pair visible, i.e.
// the key tile and the query tile lie inside the document and (causal) the tile's last key is no
// later than the query tile's first query. Computed once per CTA; uniform across it.
struct UnmaskedQueryTiles {
  int first_q0, last_q0;  // q0 in [first_q0, last_q0]; empty when first_q0 > last_q0
  FLAMIA_HD bool contains(int q0) const { return q0 >= first_q0 && q0 <= last_q0; }
};

FLAMIA_HD UnmaskedQueryTiles unmasked_query_tiles(const KeyTileItem& item, bool causal,
                                                  int window = 0) {
  const DocumentSpan& s = item.span;
  const bool keys_inside = item.key0 >= s.k_start && item.key0 + kBlockN <= s.k_end;
  const int last_key = item.key0 + kBlockN - 1 - s.k_start;  // document-local
  UnmaskedQueryTiles tiles{causal ? s.q_start + last_key : s.q_start, s.q_end - kBlockM};
  // a sliding window: the tile's last row must still see the key tile's first key
  const int window_last = s.q_start + (item.key0 - s.k_start) + window - kBlockM;
  if (causal && window > 0 && window_last < tiles.last_q0) tiles.last_q0 = window_last;
  if (tiles.first_q0 < s.q_start) tiles.first_q0 = s.q_start;
  if (!keys_inside) tiles.first_q0 = tiles.last_q0 + 1;
  return tiles;
}

// Causal: a query tile whose last row lies before the key tile's first key sees nothing of it.
FLAMIA_HD bool query_tile_sees_key_tile(const KeyTileItem& item, int q0, bool causal) {
  if (!causal) return true;
  const int last_q = std::min(q0 + kBlockM, item.span.q_end) - 1;
  const int first_k = std::max(item.key0, item.span.k_start);
  return last_q - item.span.q_start >= first_k - item.span.k_start;
}

// The first query tile (q0) that sees the key tile, or a value >= q_end when none does. Query
// tiles start at floor16(q_start) + m * kBlockM. Visibility is monotone in q0 (a later tile has
// later rows), so every later tile sees the key tile too. Closed form of "the first q0 for which
// query_tile_sees_key_tile holds": min(q0 + kBlockM, q_end) - 1 - q_start >= need holds iff
// q_end - 1 - q_start >= need and q0 >= need + q_start + 1 - kBlockM.
FLAMIA_HD int first_visible_query_tile(const KeyTileItem& item, bool causal) {
  // A document without queries has no query tile (floor16(q_start) may still lie below q_end).
  if (item.span.q_end <= item.span.q_start) return item.span.q_end;
  const int q_begin = floor_to_group(item.span.q_start);
  if (!causal) return q_begin;
  const int first_k = std::max(item.key0, item.span.k_start);
  const int need = first_k - item.span.k_start;
  if (item.span.q_end - 1 - item.span.q_start < need) return item.span.q_end;
  const int lowest = need + item.span.q_start + 1 - kBlockM - q_begin;
  const int m = lowest > 0 ? (lowest + kBlockM - 1) / kBlockM : 0;
  return q_begin + m * kBlockM;
}

// The last query tile of the span (the first a CTA visits, StepCursor), or q_first - kBlockM
// (none) when no tile sees the key tile (q_first >= q_end, first_visible_query_tile).
FLAMIA_HD int last_query_tile(const KeyTileItem& item, int q_first) {
  if (q_first >= item.span.q_end) return q_first - kBlockM;
  return q_first + (item.span.q_end - 1 - q_first) / kBlockM * kBlockM;
}

// Query tiles the key tile visits per query head (the CTA's work is this times group_size).
FLAMIA_HD int key_tile_query_tiles(const KeyTileItem& item, bool causal) {
  if (key_tile_is_empty(item)) return 0;
  const int q0 = first_visible_query_tile(item, causal);
  return q0 < item.span.q_end ? (item.span.q_end - q0 + kBlockM - 1) / kBlockM : 0;
}

}  // namespace flamia::backward
