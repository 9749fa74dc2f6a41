// Which documents share a forward work item (a segment): documents of 1..kPackedDocumentTokens
// queries and at most as many keys whose first query lies in the same window of
// kPackedDocumentTokens packed positions. A segment then holds at most 2 * 64 - 1 rows, less than
// one query tile, and 2,048 documents of 16 tokens cost 512 items per head instead of 2,048.
// Host and device (the schedule kernel plans with it; CPU tests check it).
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/sorted_search.h"

namespace flamia::forward {

constexpr int kPackedDocumentTokens = 64;

FLAMIA_HD bool packable(const int32_t* cu_q, const int32_t* cu_k, int doc) {
  const int q_len = cu_q[doc + 1] - cu_q[doc];
  const int k_len = cu_k[doc + 1] - cu_k[doc];
  return q_len >= 1 && q_len <= kPackedDocumentTokens && k_len <= kPackedDocumentTokens;
}

FLAMIA_HD int packing_window(const int32_t* cu_q, int doc) {
  return cu_q[doc] / kPackedDocumentTokens;
}

// The work items of one document: `blocks` query tiles of it alone (doc_count 1), one item for a
// segment it leads (doc_count documents), or none (it belongs to an earlier document's segment).
struct DocumentItems {
  int blocks;
  int doc_count;
};

FLAMIA_HD DocumentItems document_items(const int32_t* cu_q, const int32_t* cu_k, int batch, int doc,
                                       int block_m) {
  if (!packable(cu_q, cu_k, doc)) return {(cu_q[doc + 1] - cu_q[doc] + block_m - 1) / block_m, 1};
  const int window = packing_window(cu_q, doc);
  if (doc > 0 && packable(cu_q, cu_k, doc - 1) && packing_window(cu_q, doc - 1) == window)
    return {0, 0};
  int count = 1;
  while (doc + count < batch && packable(cu_q, cu_k, doc + count) &&
         packing_window(cu_q, doc + count) == window)
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
// position). Rows past the segment see nothing.
FLAMIA_HD RowKeyRange segment_row_keys(int first_doc, int doc_count, int q_start, int q_len,
                                       int k_start, int row_local, const int32_t* cu_q,
                                       const int32_t* cu_k, bool causal) {
  if (row_local >= q_len) return {1, 0};
  const int token = q_start + row_local;
  // the last document of the segment whose first query is <= token
  const int lo =
      first_doc - 1 + upper_bound_by([&](int i) { return cu_q[first_doc + i]; }, doc_count, token);
  const int first = cu_k[lo] - k_start;
  const int last = causal ? first + (token - cu_q[lo]) : cu_k[lo + 1] - k_start - 1;
  return {first, last};
}

}  // namespace flamia::forward
