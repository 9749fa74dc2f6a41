// The forward's overlap plan (src/api/overlap.h): the default turns it on only where the
// attention outlasts the quantize pass several times over (long documents), with four chunks
// and 8-24 SMs left to the quantization; FLAMIA_FORWARD_OVERLAP's values override it; chunk
// counts divide the KV heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "api/overlap.h"

namespace flamia::api {
namespace {

constexpr int kH200Sms = 132;

PackedShape documents(const std::vector<int>& lengths, int heads_q, int heads_kv, int head_dim) {
  PackedShape s;
  s.batch = int(lengths.size());
  s.total_q = s.total_k = std::accumulate(lengths.begin(), lengths.end(), 0);
  s.max_seqlen_q = s.max_seqlen_k = *std::max_element(lengths.begin(), lengths.end());
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  s.head_dim = head_dim;
  s.causal = true;
  return s;
}

TEST(OverlapPlan, DefaultOverlapsLongDocumentsOnly) {
  const OverlapPlan short_docs =
      plan_forward_overlap(documents(std::vector<int>(16, 2048), 16, 16, 128), kH200Sms, nullptr);
  EXPECT_FALSE(short_docs.overlapped());  // equal-2k: the pass is half the attention
  const OverlapPlan tiny =
      plan_forward_overlap(documents(std::vector<int>(2048, 16), 16, 16, 128), kH200Sms, "auto");
  EXPECT_FALSE(tiny.overlapped());

  const OverlapPlan long_docs =
      plan_forward_overlap(documents(std::vector<int>(4, 8192), 16, 16, 128), kH200Sms, nullptr);
  ASSERT_TRUE(long_docs.overlapped());  // equal-8k
  EXPECT_EQ(long_docs.chunks, 4);
  EXPECT_GE(long_docs.attention_ctas, kH200Sms - 24);
  EXPECT_LE(long_docs.attention_ctas, kH200Sms - 8);
  EXPECT_EQ(long_docs.attention_streams, kAttentionStreams);

  // One long document among short ones counts (the longest document's square).
  std::vector<int> long_tail(19, 944);
  long_tail.push_back(14851);
  EXPECT_TRUE(
      plan_forward_overlap(documents(long_tail, 16, 16, 128), kH200Sms, nullptr).overlapped());
  // A training forward (keeping the backward's operands) is not overlapped by default, but
  // may be asked to be.
  const PackedShape eight_k = documents(std::vector<int>(4, 8192), 16, 16, 128);
  EXPECT_FALSE(
      plan_forward_overlap(eight_k, kH200Sms, nullptr, /*keeps_operands=*/true).overlapped());
  EXPECT_TRUE(
      plan_forward_overlap(eight_k, kH200Sms, "4:16", /*keeps_operands=*/true).overlapped());
  // A GPU too small to give 8 SMs away and keep 3/4 of them.
  EXPECT_FALSE(plan_forward_overlap(documents(std::vector<int>(4, 8192), 16, 16, 128), 16, nullptr)
                   .overlapped());
}

TEST(OverlapPlan, OverridesAndChunkCounts) {
  const PackedShape shape = documents(std::vector<int>(4, 8192), 16, 16, 128);
  EXPECT_FALSE(plan_forward_overlap(shape, kH200Sms, "off").overlapped());
  const OverlapPlan two = plan_forward_overlap(shape, kH200Sms, "2:8");
  EXPECT_EQ(two.chunks, 2);
  EXPECT_EQ(two.attention_ctas, kH200Sms - 8);
  const OverlapPlan three = plan_forward_overlap(shape, kH200Sms, "3:8:1");
  EXPECT_EQ(three.chunks, 2);  // the largest divisor of 16 KV heads up to 3
  EXPECT_EQ(three.attention_streams, 1);
  // Equal-2k forced: the override is taken as given.
  EXPECT_TRUE(
      plan_forward_overlap(documents(std::vector<int>(16, 2048), 16, 16, 128), kH200Sms, "4:16")
          .overlapped());
  // One KV head (MQA) cannot be split; SMs >= the GPU's leave nothing to the attention.
  EXPECT_FALSE(
      plan_forward_overlap(documents({8192, 8192}, 16, 1, 128), kH200Sms, "4:16").overlapped());
  EXPECT_FALSE(plan_forward_overlap(shape, kH200Sms, "4:132").overlapped());
  EXPECT_FALSE(plan_forward_overlap(shape, kH200Sms, "not a plan").overlapped());
}

TEST(OverlapPlan, ParsesItsSetting) {
  OverlapOverride setting;
  setting.chunks = setting.sms = -1;
  setting.off = true;
  EXPECT_TRUE(parse_overlap_override(nullptr, &setting));
  EXPECT_EQ(setting.chunks, 0);
  EXPECT_FALSE(setting.off);
  EXPECT_TRUE(parse_overlap_override("off", &setting));
  EXPECT_TRUE(setting.off);
  EXPECT_TRUE(parse_overlap_override("8:20:1", &setting));
  EXPECT_EQ(setting.chunks, 8);
  EXPECT_EQ(setting.sms, 20);
  EXPECT_EQ(setting.streams, 1);
  EXPECT_FALSE(setting.off);
  for (const char* bad : {"9:4", "0:4", "4:0", "4:4:3", "4:4:", "4 :4", "4:4 ", "x"})
    EXPECT_FALSE(parse_overlap_override(bad, &setting)) << bad;
}

}  // namespace
}  // namespace flamia::api
