// The forward's packing of short documents into shared work items (document_packing.h): every
// document with queries is covered exactly once, a segment is a maximal run of short documents
// in one window and fits one query tile, and each of its rows sees its own document's keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/forward/document_packing.h"
#include "kernels/forward/tile_geometry.cuh"
#include "kernels/forward/forward_config.h"
#include "ref_test_util.h"

namespace flamia::forward {
namespace {

using ref::test::cu_seqlens_from_lengths;

constexpr int kBlockM = ForwardTile<128>::kBlockM;  // the smaller query tile (head dim 128)
static_assert(kBlockM <= ForwardTile<64>::kBlockM, "segments fit every head dim's query tile");

struct Plan {
  std::vector<int> covered;  // per document: how many items' documents include it
  int segments = 0;
  int items = 0;
};

Plan plan(const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k) {
  const int batch = int(cu_q.size()) - 1;
  Plan out;
  out.covered.assign(batch, 0);
  for (int doc = 0; doc < batch; ++doc) {
    const DocumentItems d = document_items(cu_q.data(), cu_k.data(), batch, doc, kBlockM);
    out.items += d.blocks;
    if (d.blocks == 0) continue;
    for (int j = doc; j < doc + d.doc_count; ++j) ++out.covered[j];
    if (d.doc_count == 1) continue;
    ++out.segments;
    const int window = packing_window(cu_q.data(), doc, kBlockM);
    EXPECT_EQ(d.blocks, 1);
    EXPECT_LE(cu_q[doc + d.doc_count] - cu_q[doc], kBlockM) << "a segment fits one query tile";
    EXPECT_EQ(cu_q[doc] / kBlockM, (cu_q[doc + d.doc_count] - 1) / kBlockM) << "in one window";
    for (int j = doc; j < doc + d.doc_count; ++j) {
      EXPECT_TRUE(packable(cu_q.data(), cu_k.data(), j, kBlockM));
      EXPECT_EQ(packing_window(cu_q.data(), j, kBlockM), window);
    }
    const int after = doc + d.doc_count;  // maximal: the next document does not belong
    if (after < batch) {
      EXPECT_FALSE(packable(cu_q.data(), cu_k.data(), after, kBlockM) &&
                   packing_window(cu_q.data(), after, kBlockM) == window);
    }
  }
  return out;
}

void expect_every_document_once(const std::vector<int>& q_lens, const Plan& p) {
  for (size_t doc = 0; doc < q_lens.size(); ++doc)
    EXPECT_EQ(p.covered[doc], q_lens[doc] > 0 ? 1 : 0) << "document " << doc;
}

TEST(DocumentPacking, TinyDocumentsShareTiles) {
  const std::vector<int> lens(2048, 16);
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(lens);
  const Plan p = plan(cu, cu);
  expect_every_document_once(lens, p);
  EXPECT_EQ(p.segments, 256);  // eight 16-token documents per 128-position window
  EXPECT_EQ(p.items, 256);
}

TEST(DocumentPacking, LongAndEmptyDocumentsAreNotPacked) {
  const std::vector<int> lens = {5, 64, 1, 33, 0, 17, 63, 2, 200, 9, 40, 64, 64, 1, 130, 7};
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(lens);
  const Plan p = plan(cu, cu);
  expect_every_document_once(lens, p);
  // 200 and 130 tokens: each alone, in its own query tiles
  EXPECT_EQ(document_items(cu.data(), cu.data(), int(lens.size()), 8, kBlockM).blocks,
            (200 + kBlockM - 1) / kBlockM);
  EXPECT_EQ(document_items(cu.data(), cu.data(), int(lens.size()), 14, kBlockM).blocks,
            (130 + kBlockM - 1) / kBlockM);
  EXPECT_GT(p.segments, 0);
}

TEST(DocumentPacking, RandomLengthsAndCrossLengthsCoverEveryDocumentOnce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> kind(0, 9), tiny(1, 64), longer(65, 400);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> q_lens, k_lens;
    const int batch = 1 + trial % 60;
    for (int d = 0; d < batch; ++d) {
      const int k = kind(rng);
      q_lens.push_back(k == 0 ? 0 : (k < 7 ? tiny(rng) : longer(rng)));
      // half the trials: keys of other lengths (non-causal cross attention)
      k_lens.push_back(trial % 2 ? q_lens.back() : (kind(rng) < 8 ? tiny(rng) : longer(rng)));
    }
    const Plan p = plan(cu_seqlens_from_lengths(q_lens), cu_seqlens_from_lengths(k_lens));
    expect_every_document_once(q_lens, p);
  }
}

// Every row of every segment sees exactly its own document's keys (causal: up to itself), by
// brute force over the documents.
TEST(DocumentPacking, SegmentRowsSeeTheirOwnDocumentsKeys) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> len(0, 64);
  for (int trial = 0; trial < 100; ++trial) {
    const bool causal = trial % 2 == 0;
    std::vector<int> q_lens, k_lens;
    for (int d = 0; d < 40; ++d) {
      q_lens.push_back(len(rng));
      k_lens.push_back(causal ? q_lens.back() : len(rng));
    }
    const std::vector<int32_t> cu_q = cu_seqlens_from_lengths(q_lens),
                               cu_k = cu_seqlens_from_lengths(k_lens);
    const int batch = int(q_lens.size());
    for (int doc = 0; doc < batch; ++doc) {
      const DocumentItems d = document_items(cu_q.data(), cu_k.data(), batch, doc, kBlockM);
      if (d.doc_count < 2) continue;
      const int q_start = cu_q[doc], k_start = cu_k[doc];
      const int q_len = cu_q[doc + d.doc_count] - q_start;
      for (int row = 0; row < kBlockM; ++row) {
        const RowKeyRange r = segment_row_keys(doc, d.doc_count, q_start, q_len, k_start, row,
                                               cu_q.data(), cu_k.data(), causal);
        if (row >= q_len) {
          EXPECT_GT(r.first, r.last) << "a row past the segment sees nothing";
          continue;
        }
        int own = doc;
        while (cu_q[own + 1] <= q_start + row) ++own;
        const int first = cu_k[own] - k_start;
        const int last = causal ? first + (q_start + row - cu_q[own]) : cu_k[own + 1] - k_start - 1;
        EXPECT_EQ(r.first, first) << "trial " << trial << " row " << row;
        EXPECT_EQ(r.last, last) << "trial " << trial << " row " << row;
        if (!causal) continue;
        for (int window : {1, 5, 30, 64}) {  // the sliding window's first key, or the document's
          const RowKeyRange w = segment_row_keys(doc, d.doc_count, q_start, q_len, k_start, row,
                                                 cu_q.data(), cu_k.data(), true, window);
          EXPECT_EQ(w.last, last);
          EXPECT_EQ(w.first, std::max(first, last - window + 1)) << "window " << window;
        }
      }
    }
  }
}

// A causal document's work items under a sliding window (tile_geometry.cuh), against a brute
// force over its rows and keys: the visited key tiles hold every key a row of the item sees,
// start at the tile of the first one, and an item that keeps the plain masks (kNone / kCausal)
// has no row whose window starts after the first key it visits.
TEST(DocumentPacking, SlidingWindowTileGeometry) {
  constexpr int kBlockN = ForwardTile<128>::kBlockN;
  const std::vector<int> lengths = {1, 17, 113, 0, 128, 129, 300, 1000, 2049, 5};
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
  for (int window : {1, 2, 16, 17, 100, 127, 128, 129, 300, 1000, 4000})
    for (int doc = 0; doc < int(lengths.size()); ++doc) {
      const DocumentItems d =
          document_items(cu.data(), cu.data(), int(lengths.size()), doc, kBlockM);
      if (d.doc_count != 1) continue;  // segments: SegmentRowsSeeTheirOwnDocumentsKeys
      for (int m = 0; m < d.blocks; ++m) {
        const TileGeometry g = tile_geometry<kBlockM, kBlockN>(TileItem{doc, 0, m, 1}, cu.data(),
                                                               cu.data(), true, window);
        const int visited_first = g.k_tile_base - g.k_start;  // document-local, may be < 0
        const int visited_end = visited_first + g.n_tiles * kBlockN;
        EXPECT_EQ(g.k_tile_base % kPermutationGroup, 0);
        bool needs_lower_mask = false;
        int lowest_seen = 1 << 30;
        for (int row = g.q0; row < std::min(g.q0 + kBlockM, g.q_len); ++row) {
          const RowKeyRange r = document_row_keys(row, window);
          EXPECT_EQ(r.first, std::max(0, row - window + 1));
          EXPECT_EQ(r.last, row);
          EXPECT_GE(r.first, visited_first) << "window " << window << " row " << row;
          EXPECT_LT(r.last, visited_end) << "window " << window << " row " << row;
          needs_lower_mask |= r.first > std::max(visited_first, 0);
          lowest_seen = std::min(lowest_seen, r.first);
        }
        if (g.q0 < g.q_len) {
          EXPECT_LT(lowest_seen - visited_first, kBlockN) << "the first visited tile has a key";
          EXPECT_EQ(g.causal_from == TileGeometry::kWindowed, needs_lower_mask)
              << "doc " << doc << " window " << window << " item " << m;
        }
      }
    }
}

// The key tiles each consumer's 64 rows see (visible_key_tiles), against a brute force over the
// rows' keys, for both query tile heights (two and three consumers), causal and not, with and
// without a sliding window, on documents that start off the 16-key groups: every visible key of
// the band lies in a counted tile, the last counted tile holds one, and a band past the
// document counts none. The consumers release the tiles after them without computing them.
TEST(DocumentPacking, ConsumerBandsSkipOnlyTilesTheyCannotSee) {
  constexpr int kBlockN = ForwardTile<128>::kBlockN;
  constexpr int kBand = kRowsPerConsumer;
  const std::vector<int> lengths = {1,   17,  113,  0,    128, 129,  191, 192,
                                    193, 300, 1000, 2048, 5,   2049, 64,  65};
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
  int trimmed = 0, empty_bands = 0;
  auto check = [&](int block_m, bool causal, int window, const TileGeometry& g) {
    const int visited_first = g.k_tile_base - g.k_start;  // document-local, may be < 0
    for (int row0 = 0; row0 < block_m; row0 += kBand) {
      const int tiles = visible_key_tiles<kBlockN>(g, row0, kBand, causal);
      ASSERT_GE(tiles, 0);
      ASSERT_LE(tiles, g.n_tiles);
      int last_tile = -1;  // the last tile holding a key some row of the band sees
      for (int row = g.q0 + row0; row < std::min(g.q0 + row0 + kBand, g.q_len); ++row) {
        const RowKeyRange r = causal ? document_row_keys(row, window) : RowKeyRange{0, g.k_len - 1};
        if (r.first > r.last) continue;
        last_tile = std::max(last_tile, (r.last - visited_first) / kBlockN);
      }
      const bool band_empty = g.q0 + row0 >= g.q_len;
      EXPECT_EQ(tiles, band_empty ? 0 : last_tile + 1)
          << "block_m " << block_m << " causal " << causal << " window " << window << " q0 " << g.q0
          << " row0 " << row0 << " q_len " << g.q_len;
      trimmed += tiles < g.n_tiles && !band_empty;
      empty_bands += band_empty && g.n_tiles > 0;
    }
  };
  for (const int block_m : {ForwardTile<128>::kBlockM, ForwardTile<64>::kBlockM})
    for (const bool causal : {true, false})
      for (const int window : {0, 1, 17, 128, 129, 300}) {
        if (!causal && window) continue;
        for (int doc = 0; doc < int(lengths.size()); ++doc) {
          const int blocks = (lengths[doc] + block_m - 1) / block_m;
          for (int m = 0; m < blocks; ++m) {
            const TileItem item{doc, 0, m, 1};
            if (block_m == ForwardTile<128>::kBlockM)
              check(block_m, causal, window,
                    tile_geometry<ForwardTile<128>::kBlockM, kBlockN>(item, cu.data(), cu.data(),
                                                                      causal, window));
            else
              check(block_m, causal, window,
                    tile_geometry<ForwardTile<64>::kBlockM, kBlockN>(item, cu.data(), cu.data(),
                                                                     causal, window));
          }
        }
      }
  EXPECT_GT(trimmed, 0) << "some causal band ends a tile early";
  EXPECT_GT(empty_bands, 0) << "some band lies past its document";
}

// The whole plan against the contract's visibility (numerics §4, §4.3), by brute force: every
// work item of document_items, its geometry (tile_geometry) and the masks its consumers apply
// per key tile (consumer.cuh: the per-key factors' ev = -inf outside the item's keys, and the
// kNone / kCausal / kRowRange choice; scale mode kStatic's row ranges, which replace the factors'
// mask), over the tiles each consumer band computes (visible_key_tiles). Every query row lies
// in exactly one item, and the keys it keeps unmasked are exactly the keys it sees: random
// documents of every kind (empty, one token, short and packed, long), causal with and without
// sliding windows, and non-causal with other key lengths (queries without keys, keys without
// queries), for both query tile heights.
struct PlanProblem {
  std::vector<int32_t> cu_q, cu_k;
  bool causal = false;
  int window = 0;
};

// The keys query i (packed) sees, as a packed range [first, end).
std::pair<int, int> contract_keys(const PlanProblem& p, int i) {
  int doc = 0;
  while (p.cu_q[doc + 1] <= i) ++doc;
  const int k_begin = p.cu_k[doc], k_end = p.cu_k[doc + 1];
  if (!p.causal) return {k_begin, k_end};
  const int row = i - p.cu_q[doc];
  const int first = p.window > 0 ? std::max(0, row - p.window + 1) : 0;
  return {k_begin + first, k_begin + row + 1};
}

template <int kTileRows>
void check_plan_masks(const PlanProblem& p, bool static_scales, const std::string& what) {
  constexpr int kBlockN = ForwardTile<128>::kBlockN;
  const int batch = int(p.cu_q.size()) - 1;
  const int window = p.causal ? p.window : 0;
  std::vector<int> covered(p.cu_q.back(), 0);
  int failures = 0;
  for (int doc = 0; doc < batch; ++doc) {
    const DocumentItems d = document_items(p.cu_q.data(), p.cu_k.data(), batch, doc, kTileRows);
    for (int m = 0; m < d.blocks; ++m) {
      const TileGeometry g = tile_geometry<kTileRows, kBlockN>(
          TileItem{doc, 0, m, d.doc_count}, p.cu_q.data(), p.cu_k.data(), p.causal, window);
      const bool row_ranges = g.doc_count > 1 || g.causal_from == TileGeometry::kWindowed;
      for (int row = 0; row < kTileRows; ++row) {
        const int row_local = g.q0 + row;
        if (row_local >= g.q_len) continue;
        RowKeyRange keys =
            g.doc_count > 1
                ? segment_row_keys(g.first_doc, g.doc_count, g.q_start, g.q_len, g.k_start,
                                   row_local, p.cu_q.data(), p.cu_k.data(), p.causal, window)
                : document_row_keys(row_local, window);
        if (static_scales && row_ranges)
          keys = {std::max(keys.first, 0), std::min(keys.last, g.k_len - 1)};
        const int band = row / kRowsPerConsumer * kRowsPerConsumer;
        const int tiles = row_ranges
                              ? g.n_tiles
                              : visible_key_tiles<kBlockN>(g, band, kRowsPerConsumer, p.causal);
        std::vector<int> seen;  // packed indices of the keys left unmasked
        for (int n = 0; n < tiles; ++n) {
          const int first_key_local = g.k_tile_base + n * kBlockN - g.k_start;
          const bool edge =
              first_key_local < 0 || first_key_local + kBlockN > g.k_len || n >= g.causal_from;
          for (int col = 0; col < kBlockN; ++col) {
            const int key = first_key_local + col;  // relative to the item's k_start
            bool kept = false;
            if (static_scales) {
              if (row_ranges) {
                kept = key >= keys.first && key <= keys.last;
              } else if (edge) {
                const int last = std::min(p.causal ? row_local : g.k_len - 1, g.k_len - 1);
                kept = key >= 0 && key <= last;
              } else {
                kept = true;
              }
            } else {
              kept = key >= 0 && key < g.k_len;  // the factors' ev = -inf outside
              if (row_ranges) {
                kept = kept && key >= keys.first && key <= keys.last;
              } else if (n >= g.causal_from) {
                kept = kept && key <= keys.last;
              }
            }
            if (kept) seen.push_back(g.k_start + key);
          }
        }
        const int i = g.q_start + row_local;
        ++covered[i];
        const auto [first, end] = contract_keys(p, i);
        std::sort(seen.begin(), seen.end());
        bool exact = int(seen.size()) == std::max(0, end - first);
        for (size_t k = 0; exact && k < seen.size(); ++k) exact = seen[k] == first + int(k);
        if (!exact && failures++ < 3)
          ADD_FAILURE() << what << " tile rows " << kTileRows << " static " << static_scales
                        << " doc " << doc << " item " << m << " (documents " << d.doc_count
                        << ") query " << i << ": " << seen.size() << " keys kept, "
                        << std::max(0, end - first) << " visible";
      }
    }
  }
  for (size_t i = 0; i < covered.size(); ++i)
    EXPECT_EQ(covered[i], 1) << what << " tile rows " << kTileRows << " query " << i;
}

TEST(DocumentPacking, PlanMasksExactlyTheContractsKeys) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> kind(0, 9), tiny(2, 64), longer(65, 400);
  auto length = [&] {
    const int k = kind(rng);
    return k == 0 ? 0 : k == 1 ? 1 : k < 8 ? tiny(rng) : longer(rng);
  };
  const int windows[] = {0, 1, 7, 64, 100, 128, 129, 300};
  for (int trial = 0; trial < 150; ++trial) {
    PlanProblem p;
    p.causal = trial % 3 != 0;
    p.window = p.causal ? windows[trial % 8] : 0;
    std::vector<int> q_lens, k_lens;
    for (int d = 0, batch = 1 + trial % 24; d < batch; ++d) {
      q_lens.push_back(length());
      k_lens.push_back(p.causal ? q_lens.back() : length());
    }
    p.cu_q = cu_seqlens_from_lengths(q_lens);
    p.cu_k = cu_seqlens_from_lengths(k_lens);
    const std::string what = "trial " + std::to_string(trial);
    for (bool static_scales : {false, true}) {
      check_plan_masks<ForwardTile<128>::kBlockM>(p, static_scales, what);
      check_plan_masks<ForwardTile<64>::kBlockM>(p, static_scales, what);
    }
  }
}

}  // namespace
}  // namespace flamia::forward
