// Runs of short packed documents in the backward (docs/design-backward-packing.md): which
// documents pack, the runs they form, a run's work item and launch-order entry, and the packed
// visibility indices. Host/device (FLAMIA_HD), so that the CPU tests check them against
// brute-force enumerations (tests/cpu/test_backward_tiles.cpp, BackwardPacking).
#pragma once

#include <cstdint>

#include "kernels/backward/key_tiles.h"

namespace flamia::backward {

// A document *packs* when it is self-attention (its query rows are its key rows), has at least
// one token, and lies inside one 64-token window [64 w, 64 w + 64) (kPackWindow = kBlockM). Then
// each of its scale blocks (numerics section 2: query blocks of 64 and key blocks of 128 from
// floor16(start), intersected with the document) is the whole document, so one CTA step on the
// window's query tile sees all of it, and the consecutive packing documents of one window (a
// *run*) share one CTA per KV head: one step per query head instead of one CTA per document.
// Their pairs across documents are masked to exact zeros, which leaves every amax, every P-hat
// and every gradient bit what the document alone gives; only the block exponent ew of dO''
// differs per document, so a packed CTA keeps dV's unit per key row (FP8 path only).
constexpr int kPackWindow = kBlockM;
// Packed visibility indices: document d's token at position t (from its start) is
// d * kPackedPitch + t for keys and causal queries; a non-causal query is d * kPackedPitch +
// kPackWindow (it sees the whole document). kPackedPitch = 2 kPackWindow keeps documents apart:
// a query index minus a key index lies in [0, 64) (causal) or [1, 64] (non-causal) exactly when
// both belong to one document and the key is visible; across documents it is negative or at
// least kPackedPitch - kPackWindow + 1 = 65.
constexpr int kPackedPitch = 2 * kPackWindow;
FLAMIA_HD uint32_t packed_window(bool causal) {
  return causal ? uint32_t(kPackWindow) : uint32_t(kPackWindow + 1);
}

// The visibility window of visible_pair (key_tiles.h) for a CTA: kOrdinaryWindow, a packed run's
// window, either narrowed to a causal sliding window of `sliding_window` keys (0: none).
FLAMIA_HD uint32_t visibility_window(bool packed, bool causal, int sliding_window) {
  const uint32_t window = packed ? packed_window(causal) : kOrdinaryWindow;
  return causal && sliding_window > 0 && uint32_t(sliding_window) < window
             ? uint32_t(sliding_window)
             : window;
}

FLAMIA_HD bool document_packs(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int doc) {
  const int start = cu_seqlens_q[doc], end = cu_seqlens_q[doc + 1];
  return start == cu_seqlens_k[doc] && end == cu_seqlens_k[doc + 1] && end > start &&
         start / kPackWindow == (end - 1) / kPackWindow;
}

// Whether document `doc` packs and starts a run (the previous document does not pack, or lies in
// another window).
FLAMIA_HD bool starts_packed_run(const int32_t* cu_q, const int32_t* cu_k, int doc) {
  if (!document_packs(cu_q, cu_k, doc)) return false;
  return doc == 0 || !document_packs(cu_q, cu_k, doc - 1) ||
         cu_q[doc - 1] / kPackWindow != cu_q[doc] / kPackWindow;
}

// The number of documents of the run that starts at `doc` (1 to kPackWindow).
FLAMIA_HD int packed_run_length(const int32_t* cu_q, const int32_t* cu_k, int batch, int doc) {
  int end = doc + 1;
  while (end < batch && document_packs(cu_q, cu_k, end) &&
         cu_q[end] / kPackWindow == cu_q[doc] / kPackWindow)
    ++end;
  return end - doc;
}

FLAMIA_HD int packed_key_index(int doc, int position) {
  return doc * kPackedPitch + position;
}
FLAMIA_HD int packed_query_index(int doc, int position, bool causal) {
  return doc * kPackedPitch + (causal ? position : kPackWindow);
}

// The item of the run of `documents` packing documents from `first_doc`: one 64-query tile (the
// run lies in one window, so floor16 of its first token + 64 covers it) and the key tile of the
// same rows, of which only the first 64 can hold keys.
FLAMIA_HD KeyTileItem make_packed_item(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                       int first_doc, int documents, int kv_head) {
  KeyTileItem item;
  item.doc = first_doc;
  item.tile = 0;
  item.kv_head = kv_head;
  item.span.q_start = cu_seqlens_q[first_doc];
  item.span.q_end = cu_seqlens_q[first_doc + documents];
  item.span.k_start = cu_seqlens_k[first_doc];
  item.span.k_end = cu_seqlens_k[first_doc + documents];
  item.key0 = floor_to_group(item.span.k_start);
  item.packed = true;
  item.documents = documents;
  return item;
}

// A packed run in the launch order (backward_schedule.h): entries below kNoKeyTile (-1) encode
// its first document and its length.
FLAMIA_HD int32_t packed_run_entry(int first_doc, int documents) {
  return -2 - (first_doc * kPackWindow + documents - 1);
}
FLAMIA_HD bool is_packed_run_entry(int32_t entry) {
  return entry <= -2;
}
FLAMIA_HD int packed_run_first_doc(int32_t entry) {
  return (-2 - entry) / kPackWindow;
}
FLAMIA_HD int packed_run_documents(int32_t entry) {
  return (-2 - entry) % kPackWindow + 1;
}

// A packed CTA's key visibility index of key row j, from the packed query index of the same
// token (self-attention: j is also a query row; row_factors.cu stores it): the causal key index
// is the query's; a non-causal key takes position 0 of its document.
FLAMIA_HD int packed_key_from_query(int query_index, bool causal) {
  return causal ? query_index : query_index - kPackWindow;
}

}  // namespace flamia::backward
