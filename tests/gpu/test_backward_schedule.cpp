// The backward's launch order on the device (backward_schedule.h) against a host enumeration of
// the same (document, key tile) pairs and packed runs: every entry exactly once, by descending
// work, the rest kNoKeyTile, and each document's key tiles in increasing order, which the
// deterministic dQ needs (a tile's dQ turn waits for the tile before it). Both plan modes: a
// warp per document (few documents) and a thread per document (many).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/layout.h"
#include "cpu/ref_test_util.h"
#include "gpu_test_utils.h"
#include "kernels/backward/backward_schedule.h"
#include "kernels/backward/key_tiles.h"
#include "kernels/backward/packed_runs.h"

namespace flamia::test {
namespace {

using backward::kBlockN;
using backward::kNoKeyTile;
using ref::test::cu_seqlens_from_lengths;

struct ScheduleCase {
  std::string name;
  std::vector<int> lengths;
  bool causal;
  bool pack;
  int window = 0;  // a causal sliding window (PackedShape::sliding_window; 0: none)
};

// The launch's key tiles per document (backward_launch.cu).
int tiles_per_doc(const std::vector<int>& lengths) {
  const int longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  return backward::key_tiles_per_document(longest);
}

// An order entry and the work (query tiles) that sorts it.
struct Entry {
  int32_t entry;
  int work;
};

// What the plan must place, document by document, tiles in increasing order. Under a sliding
// window a tile's work is capped by sliding_window_query_tiles (the plan's cost, an upper bound
// of the windowed work that keeps a document's tiles in increasing order); packed runs take none.
std::vector<Entry> expected_entries(const std::vector<int32_t>& cu, int key_tiles_per_doc,
                                    bool causal, bool pack, int window) {
  std::vector<Entry> out;
  const int batch = int(cu.size()) - 1;
  for (int doc = 0; doc < batch; ++doc) {
    if (pack && backward::document_packs(cu.data(), cu.data(), doc)) {
      if (backward::starts_packed_run(cu.data(), cu.data(), doc)) {
        const int documents = backward::packed_run_length(cu.data(), cu.data(), batch, doc);
        const backward::KeyTileItem item =
            backward::make_packed_item(cu.data(), cu.data(), doc, documents, 0);
        out.push_back({backward::packed_run_entry(doc, documents),
                       backward::key_tile_query_tiles(item, causal)});
      }
      continue;
    }
    for (int tile = 0; tile < key_tiles_per_doc; ++tile) {
      const backward::KeyTileItem item =
          backward::make_key_tile_item(cu.data(), cu.data(), doc, tile, 0);
      if (backward::key_tile_is_empty(item)) break;
      int work = backward::key_tile_query_tiles(item, causal);
      if (causal && window > 0) work = std::min(work, backward::sliding_window_query_tiles(window));
      out.push_back({doc * key_tiles_per_doc + tile, work});
    }
  }
  return out;
}

class BackwardScheduleTest : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(BackwardScheduleTest, PlacesEveryPairByWorkKeepingTileOrder) {
  FLAMIA_REQUIRE_SM90();
  const ScheduleCase& c = GetParam();
  const std::vector<int32_t> cu = cu_seqlens_from_lengths(c.lengths);
  const int batch = int(c.lengths.size());
  const int key_tiles_per_doc = tiles_per_doc(c.lengths);
  const int slots = backward::key_tiles_bound(batch, cu.back(), key_tiles_per_doc);
  ASSERT_GT(slots, 0);

  DeviceBuffer<int32_t> d_cu(cu);
  DeviceBuffer<int32_t> d_order{size_t(slots)};
  FLAMIA_CUDA_OK(poison_device(d_order.get(), size_t(slots) * sizeof(int32_t), 0x5A));
  PackedShape shape;
  shape.cu_seqlens_q = d_cu.get();
  shape.cu_seqlens_k = d_cu.get();
  shape.batch = batch;
  shape.total_q = shape.total_k = cu.back();
  shape.causal = c.causal;
  shape.sliding_window = c.window;
  FLAMIA_CUDA_OK(backward::launch_backward_schedule(shape, key_tiles_per_doc, slots, c.pack,
                                                    nullptr, d_order.get(),
                                                    hopper::Launch::kInOrder, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int32_t> order = d_order.download();

  const std::vector<Entry> expected =
      expected_entries(cu, key_tiles_per_doc, c.causal, c.pack, c.window);
  ASSERT_LE(expected.size(), size_t(slots));
  std::map<int32_t, int> work_of;
  for (const Entry& e : expected) work_of[e.entry] = e.work;
  ASSERT_EQ(work_of.size(), expected.size()) << "the enumeration repeats an entry";

  std::map<int32_t, int> seen;
  int previous_work = 1 << 30;
  std::map<int, int> last_tile_of_doc;
  for (int at = 0; at < slots; ++at) {
    const int32_t entry = order[at];
    if (at >= int(expected.size())) {
      EXPECT_EQ(entry, kNoKeyTile)
          << "slot " << at << " past the " << expected.size() << " entries";
      continue;
    }
    ASSERT_TRUE(work_of.count(entry)) << "slot " << at << " holds " << entry;
    EXPECT_EQ(++seen[entry], 1) << "entry " << entry << " placed twice";
    const int work = work_of[entry];
    EXPECT_LE(work, previous_work) << "slot " << at << ": work rises";
    previous_work = work;
    if (!backward::is_packed_run_entry(entry)) {
      const int doc = entry / key_tiles_per_doc, tile = entry % key_tiles_per_doc;
      auto last = last_tile_of_doc.find(doc);
      if (last != last_tile_of_doc.end()) {
        EXPECT_GT(tile, last->second)
            << "document " << doc << ": tile " << tile << " after " << last->second;
      }
      last_tile_of_doc[doc] = tile;
    }
  }
  EXPECT_EQ(seen.size(), expected.size());
}

std::vector<int> random_lengths(int count, int max_length, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(0, max_length);
  std::vector<int> lengths(count);
  for (int& n : lengths) n = length(rng);
  return lengths;
}

std::vector<ScheduleCase> schedule_cases() {
  const std::vector<int> awkward = {1, 17, 113, 0, 2049, 300};
  const std::vector<int> equal_8k(4, 8192);
  std::vector<ScheduleCase> cases = {
      {"equal_8k_causal", equal_8k, true, true},
      // every tile of a non-causal document has the same work: ties within documents
      {"equal_8k_full", equal_8k, false, true},
      {"one_32k_full", {32768}, false, true},
      {"awkward_causal", awkward, true, true},
      {"awkward_full_unpacked", awkward, false, false},
      // 128 documents: the last count with a warp per document; 129: a thread per document
      {"warp_mode_limit", random_lengths(128, 700, 1), false, true},
      {"thread_mode", random_lengths(129, 700, 2), false, true},
      {"tiny_packed", random_lengths(600, 40, 3), true, true},
      {"tiny_unpacked", random_lengths(600, 40, 4), true, false},
      {"mixed", {1, 2049, 17, 0, 6000, 113, 64, 63, 65, 1000}, true, true},
      // sliding windows: the capped costs tie most of a long document's tiles, which must still
      // come in increasing order (the windowed deterministic dQ waits on the tile before)
      {"window_300_causal", {1, 17, 113, 0, 2049, 300, 8192}, true, true, 300},
      {"window_9_mixed", {1, 2049, 17, 0, 6000, 113, 64, 63, 65, 1000}, true, true, 9},
      {"window_100_thread_mode", random_lengths(300, 900, 5), true, true, 100},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Layouts, BackwardScheduleTest, ::testing::ValuesIn(schedule_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flamia::test
