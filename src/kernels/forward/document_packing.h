// Which documents share a forward work item (a segment): documents of 1..kPackedDocumentTokens
// queries and at most as many keys that lie entirely inside the same window of `window` packed
// positions, the query tile's rows (block_m). A segment then fills at most one query tile, so
// 2,048 documents of 16 tokens cost 256 items per head (head dim 128) instead of 2,048, and both
// consumer warpgroups have rows. A short document that crosses a window edge is an item alone.
// Host and device (the schedule kernel plans with it; CPU tests check it).
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/sliding_window.h"
#include "common/sorted_search.h"

namespace flamia::forward {

constexpr int kPackedDocumentTokens = 64;

FLAMIA_HD int packing_window(const int32_t* cu_q, int doc, int window) {
  return cu_q[doc] / window;
}

FLAMIA_HD bool packable(const int32_t* cu_q, const int32_t* cu_k, int doc, int window) {
  const int q_len = cu_q[doc + 1] - cu_q[doc];
  const int k_len = cu_k[doc + 1] - cu_k[doc];
  return q_len >= 1 && q_len <= kPackedDocumentTokens && k_len <= kPackedDocumentTokens &&
         packing_window(cu_q, doc, window) == (cu_q[doc + 1] - 1) / window;
}

// The work items of one document: `blocks` query tiles of it alone (doc_count 1), one item for a
// segment it leads (doc_count documents), or none (it belongs to an earlier document's segment).
struct DocumentItems {
  int blocks;
  int doc_count;
};

FLAMIA_HD DocumentItems document_items(const int32_t* cu_q, const int32_t* cu_k, int batch, int doc,
                                       int block_m) {
  const int w = block_m;  // the packing window: one query tile's rows
  if (!packable(cu_q, cu_k, doc, w))
    return {(cu_q[doc + 1] - cu_q[doc] + block_m - 1) / block_m, 1};
  const int window = packing_window(cu_q, doc, w);
  if (doc > 0 && packable(cu_q, cu_k, doc - 1, w) && packing_window(cu_q, doc - 1, w) == window)
    return {0, 0};
  int count = 1;
  while (doc + count < batch && packable(cu_q, cu_k, doc + count, w) &&
         packing_window(cu_q, doc + count, w) == window)
    ++count;
  return {1, count};
}

// Visible keys of one query row, as key indices relative to the item's k_start: [first, last].
struct RowKeyRange {
  int first;
  int last;
};

// A row's range in a segment of documents [first_doc, first_doc + doc_count) whose queries start
// at q_start (q_len rows) and keys at k_start: its own document's keys (causal: up to its own
// position, and from the sliding window's first key when `window` > 0). Rows past the segment
// see nothing.
FLAMIA_HD RowKeyRange segment_row_keys(int first_doc, int doc_count, int q_start, int q_len,
                                       int k_start, int row_local, const int32_t* cu_q,
                                       const int32_t* cu_k, bool causal, int window = 0) {
  if (row_local >= q_len) return {1, 0};
  const int token = q_start + row_local;
  // the last document of the segment whose first query is <= token
  const int lo =
      first_doc - 1 + upper_bound_by([&](int i) { return cu_q[first_doc + i]; }, doc_count, token);
  const int first = cu_k[lo] - k_start;
  const int position = token - cu_q[lo];
  if (!causal) return {first, cu_k[lo + 1] - k_start - 1};
  return {first + sliding_window_first_key(position, window), first + position};
}

}  // namespace flamia::forward
