// The backward's tile geometry (key_tiles.h) against a brute-force enumeration of the visibility
// rule of docs/numerics.md §4 (same document; causal: j - k_start <= i - q_start): the first query
// tile that sees a key tile, the number of query tiles a key tile visits, and the steps that
// skip the per-element masks (every pair of the 128-key x 64-query step visible, and no other).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/backward/backward_schedule.h"
#include "kernels/backward/key_tiles.h"
#include "kernels/backward/packed_runs.h"
#include "ref_test_util.h"

namespace flamia::backward {
namespace {

struct Document {
  int q_start, q_len, k_start, k_len;
};

// window: a causal sliding window of that many keys (0: none).
bool visible(const Document& d, bool causal, int i, int j, int window = 0) {
  if (i < d.q_start || i >= d.q_start + d.q_len) return false;
  if (j < d.k_start || j >= d.k_start + d.k_len) return false;
  const int distance = (i - d.q_start) - (j - d.k_start);
  return !causal || (distance >= 0 && (window == 0 || distance < window));
}

// Counts the visible pairs of the step (key tile at key0, query tile at q0).
int visible_pairs(const Document& d, bool causal, int key0, int q0, int window = 0) {
  int count = 0;
  for (int j = key0; j < key0 + kBlockN; ++j)
    for (int i = q0; i < q0 + kBlockM; ++i) count += visible(d, causal, i, j, window);
  return count;
}

// Every key tile and query tile of document `doc` of the packed layout given by the lengths.
void check_document(const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k, int doc,
                    bool causal) {
  const Document d{cu_q[doc], cu_q[doc + 1] - cu_q[doc], cu_k[doc], cu_k[doc + 1] - cu_k[doc]};
  const int q_begin = floor_to_group(d.q_start);
  for (int tile = 0;; ++tile) {
    const KeyTileItem item = make_key_tile_item(cu_q.data(), cu_k.data(), doc, tile, 0);
    if (key_tile_is_empty(item)) {
      EXPECT_TRUE(d.k_len == 0 || item.key0 >= d.k_start + d.k_len);
      break;
    }
    const int first = first_visible_query_tile(item, causal);
    const UnmaskedQueryTiles unmasked = unmasked_query_tiles(item, causal);
    int expected_first = d.q_start + d.q_len;  // none
    int expected_last = -1;                    // the last tile that sees the key tile
    int tiles_seen = 0;
    // a document without queries has no query tile (floor16(q_start) may lie below q_start)
    for (int q0 = q_begin; d.q_len > 0 && q0 < d.q_start + d.q_len; q0 += kBlockM) {
      const int pairs = visible_pairs(d, causal, item.key0, q0);
      if (pairs > 0 && expected_first == d.q_start + d.q_len) expected_first = q0;
      if (pairs > 0) expected_last = q0;
      if (q0 >= expected_first) ++tiles_seen;
      EXPECT_EQ(query_tile_sees_key_tile(item, q0, causal), pairs > 0)
          << "doc " << doc << " tile " << tile << " q0 " << q0;
      EXPECT_EQ(unmasked.contains(q0), pairs == kBlockN * kBlockM)
          << "doc " << doc << " tile " << tile << " q0 " << q0 << " visible " << pairs;
    }
    // The CTA visits the tiles from last_query_tile down to `first` (StepCursor): exactly the
    // tiles that see the key tile, none when none does.
    if (expected_first < d.q_start + d.q_len) {
      EXPECT_EQ(first, expected_first) << "doc " << doc << " tile " << tile;
      EXPECT_EQ(last_query_tile(item, first), expected_last) << "doc " << doc << " tile " << tile;
    } else {
      EXPECT_GE(first, d.q_start + d.q_len) << "doc " << doc << " tile " << tile;
      EXPECT_LT(last_query_tile(item, first), first) << "doc " << doc << " tile " << tile;
    }
    EXPECT_EQ(key_tile_query_tiles(item, causal), tiles_seen) << "doc " << doc << " tile " << tile;
  }
}

// A causal document under a sliding window: the rows each key tile's span keeps (every row that
// sees one of its keys, none past), the steps without masks (every pair visible), the first key
// tile each query tile sees (where its deterministic dQ order starts), and the backward plan's
// capped cost (an upper bound of the work, never increasing with the tile index).
void check_windowed_document(const std::vector<int32_t>& cu, int doc, int window) {
  const Document d{cu[doc], cu[doc + 1] - cu[doc], cu[doc], cu[doc + 1] - cu[doc]};
  const int q_begin = floor_to_group(d.q_start);
  int previous_cost = 1 << 30;
  std::vector<int> first_tile_seen;  // per query tile, from brute force
  for (int q0 = q_begin; q0 < d.q_start + d.q_len; q0 += kBlockM) first_tile_seen.push_back(-1);
  for (int tile = 0;; ++tile) {
    const KeyTileItem plain = make_key_tile_item(cu.data(), cu.data(), doc, tile, 0);
    if (key_tile_is_empty(plain)) break;
    const KeyTileItem item = with_sliding_window(plain, true, window);
    const UnmaskedQueryTiles unmasked = unmasked_query_tiles(item, true, window);
    int tiles_seen = 0;
    int last_seen = -1;
    for (int q0 = q_begin, m = 0; q0 < d.q_start + d.q_len; q0 += kBlockM, ++m) {
      const int pairs = visible_pairs(d, true, item.key0, q0, window);
      tiles_seen += pairs > 0;
      if (pairs > 0) last_seen = q0;
      if (pairs > 0 && first_tile_seen[m] < 0) first_tile_seen[m] = tile;
      EXPECT_EQ(unmasked.contains(q0), pairs == kBlockN * kBlockM)
          << "doc " << doc << " window " << window << " tile " << tile << " q0 " << q0;
      if (pairs > 0) {
        EXPECT_LT(q0, item.span.q_end) << "window " << window << " tile " << tile;
        EXPECT_EQ(first_key_tile_seen(item, q0, true, window), first_tile_seen[m])
            << "window " << window << " tile " << tile << " q0 " << q0;
      }
    }
    for (int i = item.span.q_end; i < d.q_start + d.q_len; ++i)
      for (int j = item.key0; j < item.key0 + kBlockN; ++j)
        ASSERT_FALSE(visible(d, true, i, j, window)) << "row " << i << " past the span sees " << j;
    EXPECT_EQ(key_tile_query_tiles(item, true), tiles_seen)
        << "doc " << doc << " window " << window << " tile " << tile;
    // the CTA's first step (StepCursor) is the last tile that sees the key tile
    const int first = first_visible_query_tile(item, true);
    if (tiles_seen > 0)
      EXPECT_EQ(last_query_tile(item, first), last_seen) << "window " << window << " tile " << tile;
    else
      EXPECT_LT(last_query_tile(item, first), first) << "window " << window << " tile " << tile;
    const int cost =
        std::min(key_tile_query_tiles(plain, true), sliding_window_query_tiles(window));
    EXPECT_GE(cost, tiles_seen) << "window " << window << " tile " << tile;
    EXPECT_LE(cost, previous_cost) << "window " << window << " tile " << tile;
    previous_cost = cost;
  }
}

using ref::test::cu_seqlens_from_lengths;

TEST(BackwardTiles, SlidingWindows) {
  const std::vector<int> lengths = {1, 17, 113, 0, 128, 129, 64, 63, 300, 1000, 2, 191, 257};
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
  for (int window : {1, 2, 17, 63, 64, 65, 100, 127, 128, 129, 200, 300, 999, 5000})
    for (int doc = 0; doc + 1 < int(cu.size()); ++doc) check_windowed_document(cu, doc, window);
}

TEST(BackwardTiles, SlidingWindowVisibilityIsTheWindowedRule) {
  // visible_pair with visibility_window on a document's local positions, against the rule.
  for (int window : {1, 9, 64, 100}) {
    const uint32_t ordinary = visibility_window(false, true, window);
    const uint32_t packed = visibility_window(true, true, window);
    EXPECT_EQ(packed, uint32_t(std::min(window, int(packed_window(true)))));
    for (int i = 0; i < 200; ++i)
      for (int j = 0; j < 200; ++j)
        EXPECT_EQ(visible_pair(j, i, ordinary), j <= i && i - j < window) << i << " " << j;
  }
  EXPECT_EQ(visibility_window(false, true, 0), kOrdinaryWindow);
  EXPECT_EQ(visibility_window(true, false, 5), packed_window(false));
}

TEST(BackwardTiles, CausalDocumentsOfAwkwardLengths) {
  const std::vector<int> lengths = {1, 17, 113, 0, 128, 129, 64, 63, 300, 1000, 2, 191, 257};
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
  for (int doc = 0; doc + 1 < int(cu.size()); ++doc) check_document(cu, cu, doc, true);
}

TEST(BackwardTiles, NonCausalCrossLengths) {
  const std::vector<int32_t> cu_q = cu_seqlens_from_lengths({1, 17, 300, 0, 64, 129, 5});
  const std::vector<int32_t> cu_k = cu_seqlens_from_lengths({40, 0, 113, 7, 64, 500, 1});
  for (int doc = 0; doc + 1 < int(cu_q.size()); ++doc) check_document(cu_q, cu_k, doc, false);
}

TEST(BackwardTiles, RandomLayouts) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> length(0, 700);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> lq, lk;
    for (int doc = 0; doc < 6; ++doc) {
      lq.push_back(length(rng));
      lk.push_back(trial % 2 ? length(rng) : lq.back());
    }
    const bool causal = trial % 2 == 0;  // causal documents have equal lengths
    const std::vector<int32_t> cu_q = cu_seqlens_from_lengths(lq),
                               cu_k = cu_seqlens_from_lengths(lk);
    for (int doc = 0; doc < 6; ++doc) check_document(cu_q, cu_k, doc, causal);
  }
}

// The key tiles with keys, counted tile by tile as the schedule walks them.
int key_tiles_with_keys(const std::vector<int32_t>& cu_k, int key_tiles_per_doc) {
  int count = 0;
  for (int doc = 0; doc + 1 < int(cu_k.size()); ++doc)
    for (int tile = 0; tile < key_tiles_per_doc; ++tile)
      count += !key_tile_is_empty(make_key_tile_item(cu_k.data(), cu_k.data(), doc, tile, 0));
  return count;
}

// The launch's key tiles per document (backward_launch.cu).
int tiles_per_doc(const std::vector<int>& lengths) {
  const int longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  return key_tiles_per_document(longest);
}

int bound_of(const std::vector<int>& lengths) {
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
  return key_tiles_bound(int(lengths.size()), cu.back(), tiles_per_doc(lengths));
}

// The grid's CTAs per KV head cover every key tile with keys (backward_schedule.h): checked on
// random layouts, and equal to the count in the bound's worst case, so a smaller bound fails.
TEST(BackwardTiles, KeyTilesBoundCoversEveryTileWithKeys) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::uniform_int_distribution<int> length(0, trial % 4 == 0 ? 3000 : trial % 2 ? 40 : 300);
    std::vector<int> lengths(1 + trial % 37);
    for (int& len : lengths) len = length(rng);
    const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
    const int count = key_tiles_with_keys(cu, tiles_per_doc(lengths));
    EXPECT_GE(bound_of(lengths), count) << "trial " << trial;
    EXPECT_LE(bound_of(lengths), int(lengths.size()) * tiles_per_doc(lengths));
  }
  // A document that starts at offset 15 of a group of 16 and ends one key past two tiles
  // (after one of 15 keys): the bound's worst case, 1 + 3 tiles, met exactly.
  const std::vector<int> worst = {15, 2 * kBlockN - (kPermutationGroup - 2)};
  EXPECT_EQ(key_tiles_with_keys(cu_seqlens_from_lengths(worst), tiles_per_doc(worst)), 4);
  EXPECT_EQ(bound_of(worst), 4);
  EXPECT_EQ(bound_of({}), 0);
}

// ---- packed short documents ----------------------------------------------------------------

// Layouts with many short documents (and long ones between them): lengths 0 to 80, some 300.
std::vector<int> short_document_lengths(std::mt19937& rng, int documents) {
  std::uniform_int_distribution<int> length(0, 80), pick(0, 9);
  std::vector<int> lengths(documents);
  for (int& len : lengths) len = pick(rng) == 0 ? 300 : length(rng);
  return lengths;
}

bool packs_by_definition(const std::vector<int32_t>& cu, int doc) {
  const int start = cu[doc], end = cu[doc + 1];
  if (end <= start) return false;
  for (int t = start; t < end; ++t)
    if (t / kPackWindow != start / kPackWindow) return false;
  return true;
}

// Runs: every packing document in exactly one run, a run's documents consecutive, packing and in
// one window, and runs maximal (the documents around a run do not extend it).
TEST(BackwardPacking, RunsPartitionThePackingDocuments) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<int> lengths = short_document_lengths(rng, 1 + trial % 60);
    const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
    const int batch = int(lengths.size());
    std::vector<int> covered(batch, 0);
    for (int doc = 0; doc < batch; ++doc) {
      EXPECT_EQ(document_packs(cu.data(), cu.data(), doc), packs_by_definition(cu, doc));
      if (!starts_packed_run(cu.data(), cu.data(), doc)) continue;
      const int n = packed_run_length(cu.data(), cu.data(), batch, doc);
      ASSERT_GE(n, 1);
      ASSERT_LE(n, kPackWindow);
      const int window = cu[doc] / kPackWindow;
      for (int d = doc; d < doc + n; ++d) {
        ++covered[d];
        EXPECT_TRUE(packs_by_definition(cu, d));
        EXPECT_EQ(cu[d] / kPackWindow, window);
      }
      if (doc > 0) {
        EXPECT_FALSE(packs_by_definition(cu, doc - 1) && cu[doc - 1] / kPackWindow == window);
      }
      if (doc + n < batch) {
        EXPECT_FALSE(packs_by_definition(cu, doc + n) && cu[doc + n] / kPackWindow == window);
      }
      // The run's single query tile (floor16 of its first token, 64 rows) covers it, and with it
      // each document's own first query block (the contract's scale block): the whole document.
      const KeyTileItem item = make_packed_item(cu.data(), cu.data(), doc, n, 0);
      EXPECT_LE(item.span.q_end, item.key0 + kBlockM);
      EXPECT_EQ(first_visible_query_tile(item, true), item.key0);
      EXPECT_EQ(key_tile_query_tiles(item, true), 1);
      for (int d = doc; d < doc + n; ++d) EXPECT_LE(cu[d + 1], floor_to_group(cu[d]) + kBlockM);
      const int32_t entry = packed_run_entry(doc, n);
      EXPECT_TRUE(is_packed_run_entry(entry));
      EXPECT_EQ(packed_run_first_doc(entry), doc);
      EXPECT_EQ(packed_run_documents(entry), n);
    }
    for (int doc = 0; doc < batch; ++doc)
      EXPECT_EQ(covered[doc], packs_by_definition(cu, doc) ? 1 : 0) << "trial " << trial;
    // Cross lengths never pack.
    std::vector<int> shifted = lengths;
    shifted.insert(shifted.begin(), 1);
    shifted.pop_back();
    const std::vector<int32_t> cu_k = cu_seqlens_from_lengths(shifted);
    for (int doc = 0; doc < batch; ++doc) {
      if (document_packs(cu.data(), cu_k.data(), doc)) {
        EXPECT_EQ(cu[doc], cu_k[doc]);
      }
    }
  }
  EXPECT_FALSE(is_packed_run_entry(kNoKeyTile));
  EXPECT_FALSE(is_packed_run_entry(0));
}

// The packed visibility rule against the definition (same document; causal: key position <=
// query position) for every pair of tokens of a run, with the indices the kernel uses: the query
// index from row_factors.cu, the key index derived from it (packed_key_from_query).
TEST(BackwardPacking, VisibilityRuleMatchesTheDefinition) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const std::vector<int> lengths = short_document_lengths(rng, 40);
    const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
    const int batch = int(lengths.size());
    for (bool causal : {true, false}) {
      for (int doc = 0; doc < batch; ++doc) {
        if (!starts_packed_run(cu.data(), cu.data(), doc)) continue;
        const int n = packed_run_length(cu.data(), cu.data(), batch, doc);
        auto doc_of = [&](int t) {
          int d = doc;
          while (cu[d + 1] <= t) ++d;
          return d;
        };
        auto query_index = [&](int t) {
          const int d = doc_of(t);
          return packed_query_index(d, t - cu[d], causal);
        };
        const uint32_t window = packed_window(causal);
        for (int i = cu[doc]; i < cu[doc + n]; ++i)
          for (int j = cu[doc]; j < cu[doc + n]; ++j) {
            const bool expected = doc_of(i) == doc_of(j) && (!causal || j <= i);
            EXPECT_EQ(
                visible_pair(packed_key_from_query(query_index(j), causal), query_index(i), window),
                expected)
                << "i " << i << " j " << j << (causal ? " causal" : " full");
          }
        // Rows outside the run never see a packed key, nor queries a key outside it.
        EXPECT_FALSE(visible_pair(packed_key_from_query(query_index(cu[doc]), causal),
                                  kQueryOutside, window));
        EXPECT_FALSE(visible_pair(kKeyOutside, query_index(cu[doc]), window));
      }
    }
  }
  // The ordinary rule is key index <= query index.
  for (int k : {0, 5, kKeyOutside})
    for (int q : {kQueryOutside, 0, 4, 5, kQuerySeesAll})
      EXPECT_EQ(visible_pair(k, q, kOrdinaryWindow), k <= q) << k << " " << q;
}

// The launch bound still covers the order's entries when runs replace their documents' pairs.
TEST(BackwardPacking, KeyTilesBoundCoversPackedOrders) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    const std::vector<int> lengths = short_document_lengths(rng, 1 + trial);
    const std::vector<int32_t> cu = cu_seqlens_from_lengths(lengths);
    const int batch = int(lengths.size());
    const int per_doc = tiles_per_doc(lengths);
    int entries = 0;
    for (int doc = 0; doc < batch; ++doc) {
      if (document_packs(cu.data(), cu.data(), doc)) {
        entries += starts_packed_run(cu.data(), cu.data(), doc);
        continue;
      }
      for (int tile = 0; tile < per_doc; ++tile)
        entries += !key_tile_is_empty(make_key_tile_item(cu.data(), cu.data(), doc, tile, 0));
    }
    EXPECT_LE(entries, bound_of(lengths)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace flamia::backward
