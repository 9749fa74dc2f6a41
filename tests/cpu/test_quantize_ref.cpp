// quantize_ref: scale blocks (document-local, tile-aligned), per-block exponents, token-major
// layouts (permuted and natural, padding), empty documents.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "reference/quantize_ref.h"
#include "ref_test_util.h"

namespace flamia::ref {
namespace {

using ref::test::cu_seqlens_from_lengths;

bool same_blocks(const std::vector<TokenBlock>& a, const std::vector<TokenBlock>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].begin != b[i].begin || a[i].end != b[i].end) return false;
  return true;
}

// Every token of every document in exactly one block, no block crossing a document boundary.
void expect_document_partition(const std::vector<int32_t>& cu,
                               const std::vector<TokenBlock>& blocks) {
  std::vector<int> owner(size_t(cu.back()), -1), cover(size_t(cu.back()), 0);
  for (size_t b = 0; b + 1 < cu.size(); ++b)
    for (int t = cu[b]; t < cu[b + 1]; ++t) owner[t] = int(b);
  for (const TokenBlock& block : blocks) {
    ASSERT_LT(block.begin, block.end);
    for (int t = block.begin; t < block.end; ++t) {
      ++cover[t];
      EXPECT_EQ(owner[t], owner[block.begin]) << "block crosses a document boundary at " << t;
    }
  }
  for (int c : cover) EXPECT_EQ(c, 1);
}

TEST(ScaleBlocks, ExactIsOneTokenPerBlock) {
  const std::vector<int32_t> cu{0, 3, 3, 5};
  EXPECT_TRUE(
      same_blocks(scale_blocks(cu, ScaleMode::kExact), {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
}

TEST(ScaleBlocks, Block32RestartsAtEveryDocument) {
  const std::vector<int32_t> cu{0, 5, 5, 70, 71};
  EXPECT_TRUE(same_blocks(scale_blocks(cu, ScaleMode::kBlock32),
                          {{0, 5}, {5, 37}, {37, 69}, {69, 70}, {70, 71}}));
}

TEST(ScaleBlocks, TileAlignedBlocksStartAtFloor16OfTheDocument) {
  const std::vector<int32_t> cu{0, 20, 150, 150, 170};
  EXPECT_TRUE(same_blocks(tile_aligned_blocks(cu, 64),
                          {{0, 20}, {20, 80}, {80, 144}, {144, 150}, {150, 170}}));
  EXPECT_TRUE(
      same_blocks(tile_aligned_blocks(cu, 128), {{0, 20}, {20, 144}, {144, 150}, {150, 170}}));
}

TEST(ScaleBlocks, AwkwardLengthsArePartitionedPerDocument) {
  const std::vector<int32_t> cu = cu_seqlens_from_lengths({1, 17, 0, 113, 0, 0, 2049, 31, 32, 33});
  expect_document_partition(cu, scale_blocks(cu, ScaleMode::kExact));
  expect_document_partition(cu, scale_blocks(cu, ScaleMode::kBlock32));
  for (int size : {64, 128}) {
    const std::vector<TokenBlock> blocks = tile_aligned_blocks(cu, size);
    expect_document_partition(cu, blocks);
    for (const TokenBlock& block : blocks) {
      // Each block starts at its document's start or on the document's 16-aligned tile grid.
      const int doc = int(std::upper_bound(cu.begin(), cu.end(), block.begin) - cu.begin()) - 1;
      const int grid = cu[doc] / 16 * 16;
      EXPECT_TRUE(block.begin == cu[doc] || (block.begin - grid) % size == 0) << block.begin;
      EXPECT_LE(block.end - block.begin, size);
    }
  }
  for (const TokenBlock& block : scale_blocks(cu, ScaleMode::kBlock32))
    EXPECT_LE(block.end - block.begin, kBlock32Tokens);
}

TEST(ScaleBlocks, EmptyInputsGiveNoBlocks) {
  EXPECT_TRUE(scale_blocks({0}, ScaleMode::kBlock32).empty());
  EXPECT_TRUE(scale_blocks({0, 0, 0}, ScaleMode::kExact).empty());
  EXPECT_TRUE(tile_aligned_blocks({0, 0}, 64).empty());
}

struct RandomSource {
  int tokens, heads, dim;
  std::vector<float> values;
  RandomSource(int t, int h, int d, uint32_t seed)
      : tokens(t), heads(h), dim(d), values(size_t(t) * h * d) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Token magnitudes spread over 2^+-6 so that scales differ between tokens.
    for (int tok = 0; tok < t; ++tok) {
      const float magnitude = std::ldexp(1.0f, int(rng() % 13) - 6);
      for (int i = 0; i < h * d; ++i) values[size_t(tok) * h * d + i] = magnitude * normal(rng);
    }
  }
  float operator()(int t, int h, int d) const { return values[(size_t(t) * heads + h) * dim + d]; }
};

TEST(Quantize, ExponentsFollowBlocksAndValuesAreScaled) {
  const std::vector<int32_t> cu = cu_seqlens_from_lengths({1, 17, 0, 70});
  const RandomSource src(cu.back(), 2, 64, 3);
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
    const std::vector<TokenBlock> blocks = scale_blocks(cu, mode);
    const Fp8Tensor q = quantize(std::cref(src), src.tokens, src.heads, src.dim, blocks);
    for (const TokenBlock& block : blocks)
      for (int h = 0; h < src.heads; ++h) {
        float amax = 0.0f;
        for (int t = block.begin; t < block.end; ++t)
          for (int d = 0; d < src.dim; ++d) amax = std::max(amax, std::fabs(src(t, h, d)));
        const int e = scale_exponent(amax);
        for (int t = block.begin; t < block.end; ++t) {
          ASSERT_EQ(q.exponent(t, h), e);
          for (int d = 0; d < src.dim; ++d) {
            ASSERT_EQ(q.value(t, h, d), quantize_e4m3(src(t, h, d), e));
            const float x = src(t, h, d), back = q.dequantized(t, h, d);
            // Normal range: relative error <= 2^-4; below it, an absolute 2^-10 * 2^e.
            EXPECT_LE(std::fabs(back - x),
                      std::max(std::fabs(x) * 0.0625f, std::ldexp(1.0f, e - 10)));
          }
        }
      }
  }
}

TEST(Quantize, Block32IsDocumentLocal) {
  const std::vector<int32_t> cu = cu_seqlens_from_lengths({40, 23, 50});
  RandomSource src(cu.back(), 1, 64, 5);
  const std::vector<TokenBlock> blocks = scale_blocks(cu, ScaleMode::kBlock32);
  const Fp8Tensor before = quantize(std::cref(src), src.tokens, 1, 64, blocks);
  for (int t = cu[2]; t < cu[3]; ++t)  // scale the third document up by 2^10
    for (int d = 0; d < 64; ++d) src.values[size_t(t) * 64 + d] *= 1024.0f;
  for (int t = 0; t < cu[1]; ++t)  // and the first down by 2^-10
    for (int d = 0; d < 64; ++d) src.values[size_t(t) * 64 + d] /= 1024.0f;
  const Fp8Tensor after = quantize(std::cref(src), src.tokens, 1, 64, blocks);
  for (int t = cu[1]; t < cu[2]; ++t) {
    EXPECT_EQ(after.exponent(t, 0), before.exponent(t, 0));
    for (int d = 0; d < 64; ++d) EXPECT_EQ(after.value(t, 0, d), before.value(t, 0, d));
  }
}

TEST(TokenMajor, PermutedAndNaturalLayoutsWithPadding) {
  for (int tokens : {1, 16, 17, 113}) {
    const RandomSource src(tokens, 2, 64, uint32_t(tokens));
    const Fp8Tensor x =
        quantize(std::cref(src), tokens, 2, 64, scale_blocks({0, tokens}, ScaleMode::kExact));
    const int64_t padded = padded_tokens(tokens);
    for (bool permuted : {false, true}) {
      const std::vector<uint8_t> t_major = token_major(x, permuted);
      ASSERT_EQ(t_major.size(), size_t(2 * 64 * padded));
      std::vector<char> written(t_major.size(), 0);
      for (int t = 0; t < tokens; ++t) {
        // Slot p of a group holds token 16g + pi(p).
        const int64_t slot = permuted ? (t / 16) * 16 + permuted_slot(t % 16) : t;
        if (permuted) {
          ASSERT_EQ((slot / 16) * 16 + permuted_token(int(slot % 16)), t);
        }
        for (int h = 0; h < 2; ++h)
          for (int d = 0; d < 64; ++d) {
            const size_t at = (size_t(h) * 64 + d) * padded + slot;
            EXPECT_EQ(t_major[at], x.value(t, h, d));
            written[at] = 1;
          }
      }
      for (size_t i = 0; i < t_major.size(); ++i)
        if (!written[i]) {
          EXPECT_EQ(t_major[i], 0) << "padding must be zero";
        }
    }
  }
}

TEST(Quantize, EmptyDocumentsAndZeroTokens) {
  const std::vector<int32_t> cu{0, 0, 0};
  const Fp8Tensor x =
      quantize([](int, int, int) { return 1.0f; }, 0, 2, 64, scale_blocks(cu, ScaleMode::kBlock32));
  EXPECT_TRUE(x.values.empty());
  EXPECT_TRUE(x.exponents.empty());
  EXPECT_TRUE(token_major(x, true).empty());
}

TEST(Quantize, ZeroBlockHasExponentZeroAndZeroValues) {
  const Fp8Tensor x = quantize([](int, int, int) { return 0.0f; }, 3, 1, 64,
                               scale_blocks({0, 3}, ScaleMode::kExact));
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(x.exponent(t, 0), 0);
    for (int d = 0; d < 64; ++d) EXPECT_EQ(x.value(t, 0, d), 0);
  }
}

}  // namespace
}  // namespace flamia::ref
