// The saved-operands header on the CPU: its layout, the cu_seqlens checksum the device check
// kernels compute (seqlens_checksum.h, the same host/device functions) and the message of a
// checksum mismatch. The device side of the check is in tests/gpu/test_backward.cpp
// (BackwardSavedOperands.*).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/saved_operands.h"
#include "api/seqlens_checksum.h"
#include "common/views.h"
#include "flamia/flamia.h"

namespace flamia::api {
namespace {

using Cu = std::vector<int32_t>;

// cu_seqlens of documents with the given lengths: {0, l0, l0 + l1, ...}.
Cu cu_from_lengths(const std::vector<int>& lengths) {
  Cu cu{0};
  for (int n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

// Random document lengths in [0, max_length] for the queries and the keys.
struct RandomPacking {
  std::vector<int> q_lengths, k_lengths;
  Cu q, k;
};
RandomPacking random_packing(std::mt19937& rng, int documents, int max_length) {
  std::uniform_int_distribution<int> length(0, max_length);
  RandomPacking r{std::vector<int>(documents), std::vector<int>(documents), {}, {}};
  for (int& n : r.q_lengths) n = length(rng);
  for (int& n : r.k_lengths) n = length(rng);
  r.q = cu_from_lengths(r.q_lengths);
  r.k = cu_from_lengths(r.k_lengths);
  return r;
}

uint64_t checksum(const Cu& q, const Cu& k) {
  EXPECT_EQ(q.size(), k.size());
  return seqlens_checksum(q.data(), k.data(), int32_t(q.size()) - 1);
}

// The kernel's split (device_checks.cu) for any block size: thread t sums entries t,
// t + threads, ...; warps add their lanes; the warps' sums arrive in any order (here reversed).
uint64_t checksum_split(const Cu& q, const Cu& k, int threads, int warp_size) {
  const int32_t batch = int32_t(q.size()) - 1;
  std::vector<uint64_t> per_thread(threads, 0);
  for (int t = 0; t < threads; ++t)
    for (int64_t i = t; i <= batch; i += threads)
      per_thread[t] += seqlens_checksum_terms(q.data(), k.data(), i);
  std::vector<uint64_t> per_warp((threads + warp_size - 1) / warp_size, 0);
  for (int t = 0; t < threads; ++t) per_warp[t / warp_size] += per_thread[t];
  uint64_t sum = 0;
  for (auto it = per_warp.rbegin(); it != per_warp.rend(); ++it) sum += *it;
  return sum;
}

const Cu kBatchA = {0, 17, 130, 243};   // lengths 17, 113, 113
const Cu kBatchB = {0, 113, 130, 243};  // lengths 113, 17, 113: same batch, totals, longest

TEST(SavedOperandsChecksum, EqualForEqualContents) {
  const Cu q = kBatchA;
  const Cu k = kBatchA;
  const Cu q_copy = q;  // other storage, same contents
  const Cu k_copy = k;
  EXPECT_EQ(checksum(q, k), checksum(q_copy, k_copy));
  EXPECT_NE(checksum(q, k), 0u);
}

TEST(SavedOperandsChecksum, ChangesWhenALengthMovesBetweenDocuments) {
  const uint64_t both_a = checksum(kBatchA, kBatchA);
  const uint64_t q_moved = checksum(kBatchB, kBatchA);
  const uint64_t k_moved = checksum(kBatchA, kBatchB);
  const uint64_t both_moved = checksum(kBatchB, kBatchB);
  const std::set<uint64_t> distinct = {both_a, q_moved, k_moved, both_moved};
  EXPECT_EQ(distinct.size(), 4u);
  // Two documents' lengths swapped (the totals and the set of lengths unchanged).
  EXPECT_NE(checksum(cu_from_lengths({5, 0, 9, 1}), cu_from_lengths({5, 0, 9, 1})),
            checksum(cu_from_lengths({5, 9, 0, 1}), cu_from_lengths({5, 9, 0, 1})));
}

TEST(SavedOperandsChecksum, ChangesWhenTheArraysAreSwapped) {
  EXPECT_NE(checksum(kBatchA, kBatchB), checksum(kBatchB, kBatchA));
  // Each term depends on the array: the same value at the same index gives two terms.
  EXPECT_NE(seqlens_checksum_term(kSeqlensQ, 1, 17), seqlens_checksum_term(kSeqlensK, 1, 17));
  EXPECT_NE(seqlens_checksum_term(kSeqlensQ, 1, 17), seqlens_checksum_term(kSeqlensQ, 2, 17));
}

// Every small change of a random packing (one entry moved by one token, two adjacent documents
// swapped, q and k swapped) gives a checksum of its own: no collision among all of them.
TEST(SavedOperandsChecksum, SmallChangesNeverCollide) {
  std::mt19937 rng(std::random_device{}());
  const uint32_t seed = rng();
  rng.seed(seed);
  for (int documents : {1, 2, 17, 113}) {
    const RandomPacking packing = random_packing(rng, documents, 300);
    const Cu& q = packing.q;
    const Cu& k = packing.k;
    std::set<Cu> contents_seen;  // (q, k) concatenated: equal contents may repeat
    std::set<uint64_t> checksums;
    auto add = [&](const Cu& q_variant, const Cu& k_variant) {
      Cu both = q_variant;
      both.insert(both.end(), k_variant.begin(), k_variant.end());
      if (!contents_seen.insert(both).second) return;
      EXPECT_TRUE(checksums.insert(checksum(q_variant, k_variant)).second)
          << "collision, seed " << seed << ", " << documents << " documents";
    };
    add(q, k);
    add(k, q);
    for (int i = 0; i <= documents; ++i)
      for (int delta : {-1, 1}) {
        Cu q_variant = q;
        q_variant[i] += delta;
        add(q_variant, k);
        Cu k_variant = k;
        k_variant[i] += delta;
        add(q, k_variant);
      }
    for (int d = 0; d + 1 < documents; ++d) {
      std::vector<int> swapped = packing.q_lengths;
      std::swap(swapped[d], swapped[d + 1]);
      add(cu_from_lengths(swapped), k);
    }
    EXPECT_GT(checksums.size(), size_t(2 * documents)) << "seed " << seed;
  }
}

// The device sums the terms over any number of threads and warps: the same bits as serially.
TEST(SavedOperandsChecksum, SameForAnySplitOverThreads) {
  std::mt19937 rng(std::random_device{}());
  const uint32_t seed = rng();
  rng.seed(seed);
  for (int documents : {1, 17, 113, 2049}) {
    const RandomPacking packing = random_packing(rng, documents, 2049);
    const Cu& q = packing.q;
    const Cu& k = packing.k;
    const uint64_t serial = checksum(q, k);
    for (int threads : {1, 32, 33, 256, 1024, 4096})
      EXPECT_EQ(checksum_split(q, k, threads, 32), serial)
          << threads << " threads, " << documents << " documents, seed " << seed;
  }
}

// Each entry's term is a bijective mix of an injective packing of (array, index, value),
// including the extremes of every part.
TEST(SavedOperandsChecksum, TermsOfDistinctEntriesDiffer) {
  std::set<uint64_t> terms;
  size_t count = 0;
  for (int32_t array : {kSeqlensQ, kSeqlensK})
    for (int64_t index : {int64_t(0), int64_t(1), int64_t(2), int64_t(INT32_MAX)})
      for (int32_t value : {0, 1, 2, -1, INT32_MAX, INT32_MIN}) {
        terms.insert(seqlens_checksum_term(array, index, value));
        ++count;
      }
  EXPECT_EQ(terms.size(), count);
}

TEST(SavedOperandsHeader, AddsTheChecksumAfterTheUnmovedFields) {
  EXPECT_LE(sizeof(SavedOperandsHeader), size_t(kWorkspaceAlignment));
  EXPECT_EQ(offsetof(SavedOperandsHeader, magic), 0u);
  EXPECT_EQ(offsetof(SavedOperandsHeader, batch), 4u);
  EXPECT_EQ(offsetof(SavedOperandsHeader, key_smoothing), 32u);
  EXPECT_EQ(offsetof(SavedOperandsHeader, cu_seqlens_checksum_low), 36u);
  EXPECT_EQ(offsetof(SavedOperandsHeader, cu_seqlens_checksum_high), 40u);
  EXPECT_EQ(kSavedOperandsHeaderFields, 11);
  EXPECT_EQ(kSavedOperandsMagic, 0x464C5302u);  // layout version 2

  SavedOperandsHeader header;
  set_cu_seqlens_checksum(header, 0x0123456789ABCDEFull);
  EXPECT_EQ(header.cu_seqlens_checksum_low, 0x89ABCDEFu);
  EXPECT_EQ(header.cu_seqlens_checksum_high, 0x01234567u);
}

TEST(SavedOperandsHeader, HostHeaderLeavesTheChecksumToTheDevice) {
  flamia_problem problem{};
  problem.batch = 3;
  problem.total_q = problem.total_k = 243;
  problem.heads_q = 4;
  problem.heads_kv = 2;
  problem.head_dim = 128;
  const SavedOperandsHeader header = saved_operands_header(problem);
  EXPECT_EQ(header.magic, kSavedOperandsMagic);
  EXPECT_EQ(header.batch, 3);
  EXPECT_EQ(header.cu_seqlens_checksum_low, 0u);
  EXPECT_EQ(header.cu_seqlens_checksum_high, 0u);
}

DeviceStatusRecord mismatch_record(int field, int32_t saved, int32_t expected) {
  DeviceStatusRecord record;
  record.code = kDeviceStatusSavedOperandsMismatch;
  record.index = field;
  record.entry = saved;
  record.next_entry = expected;
  return record;
}

TEST(SavedOperandsHeader, ChecksumMismatchNamesTheCuSeqlens) {
  const char* kWhere = "flamia_check_device_status";
  for (int field : {kSavedOperandsChecksumLowField, kSavedOperandsChecksumHighField}) {
    EXPECT_EQ(fail_saved_operands(kWhere, mismatch_record(field, int32_t(0x89ABCDEFu), 0x1234)),
              FLAMIA_ERROR_INVALID_ARGUMENT);
    const std::string message = flamia_last_error_message();
    const std::string name = field == kSavedOperandsChecksumLowField ? "cu_seqlens_checksum_low"
                                                                     : "cu_seqlens_checksum_high";
    EXPECT_NE(message.find("flamia_check_device_status: saved_operands were filled by a forward "
                           "with other cu_seqlens contents"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(name + " = 0x89abcdef in the buffer, 0x00001234 for this problem"),
              std::string::npos)
        << message;
  }
  // The other fields keep their message.
  const int scale_mode_field = offsetof(SavedOperandsHeader, scale_mode) / sizeof(int32_t);
  EXPECT_EQ(fail_saved_operands(kWhere, mismatch_record(scale_mode_field, 0, 1)),
            FLAMIA_ERROR_INVALID_ARGUMENT);
  const std::string message = flamia_last_error_message();
  EXPECT_NE(message.find("scale_mode = 0, but this problem has scale_mode = 1"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("cu_seqlens"), std::string::npos) << message;
}

}  // namespace
}  // namespace flamia::api
