// NVFP4 (numerics §9, the mixed path of Q·Kᵀ in the CPU reference): E2M1 against a brute-force
// oracle, the block-scale rule's minimality, quantization bounds, the reference's scores on
// inputs both formats hold exactly (bit-equal outputs), causality, and non-finite inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/nvfp4_numerics.h"
#include "reference/api_problem.h"
#include "reference/attention_internal.h"
#include "reference/attention_ref.h"
#include "reference/audit.h"

namespace flamia {
namespace {

constexpr int kE2M1Codes = 16;

// A fresh seed per run, in the failure messages of the test that draws it.
uint32_t fresh_seed() {
  const uint32_t seed = std::random_device{}();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}
constexpr float kE2M1Values[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Nearest E2M1 magnitude by exhaustive search, ties to the even code, satfinite.
uint8_t oracle_e2m1(float x) {
  if (std::isnan(x)) return kE2M1MaxCode;  // cuda_fp4.hpp: NaN converts to +MAXNORM
  const double a = std::fabs(double(x));
  if (std::isinf(a)) return std::signbit(x) ? uint8_t(kE2M1MaxCode | kE2M1SignBit) : kE2M1MaxCode;
  uint8_t best = 0;
  double best_distance = INFINITY;
  for (int code = 0; code <= kE2M1MaxCode; ++code) {
    const double distance = std::fabs(double(kE2M1Values[code]) - a);
    if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
      best = uint8_t(code);
      best_distance = distance;
    }
  }
  return std::signbit(x) ? uint8_t(best | kE2M1SignBit) : best;
}

TEST(Nvfp4, E2M1DecodeMatchesTheTable) {
  for (int code = 0; code < kE2M1Codes; ++code) {
    const float magnitude = kE2M1Values[code & kE2M1MaxCode];
    EXPECT_EQ(e2m1_decode(uint8_t(code)), (code & kE2M1SignBit) ? -magnitude : magnitude) << code;
  }
}

TEST(Nvfp4, E2M1EncodeMatchesTheOracle) {
  std::vector<float> xs;
  for (int i = -1024; i <= 1024; ++i) xs.push_back(float(i) / 128.0f);  // [-8, 8], every tie
  for (float mid : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float sign : {1.0f, -1.0f}) {
      xs.push_back(sign * std::nextafter(mid, 0.0f));
      xs.push_back(sign * std::nextafter(mid, 10.0f));
    }
  for (float big : {6.0f, 7.0f, 1e6f, std::numeric_limits<float>::infinity()})
    for (float sign : {1.0f, -1.0f}) xs.push_back(sign * big);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float special : {0.0f, -0.0f, nan, -nan}) xs.push_back(special);
  for (float x : xs) EXPECT_EQ(e2m1_encode(x), oracle_e2m1(x)) << x;
  EXPECT_EQ(e2m1_encode(-0.0f), kE2M1SignBit);  // -0 keeps its sign, as the device's cvt
  EXPECT_EQ(e2m1_encode(-nan), kE2M1MaxCode);   // every NaN: +6
}

// The smallest E4M3 s with 6 s >= a: checked on every code's boundary and on random a.
TEST(Nvfp4, BlockScaleIsTheSmallestThatAvoidsSaturation) {
  EXPECT_EQ(nvfp4_block_scale_code(0.0f), 0);
  EXPECT_EQ(nvfp4_block_scale_code(kE2M1Max * kE4M3Max), kE4M3MaxCode);
  EXPECT_EQ(nvfp4_block_scale_code(1e30f), kE4M3MaxCode);
  for (int code = 1; code < kE4M3MaxCode; ++code) {
    const float boundary = kE2M1Max * e4m3_decode(uint8_t(code));
    EXPECT_EQ(nvfp4_block_scale_code(boundary), code);
    EXPECT_EQ(nvfp4_block_scale_code(std::nextafter(boundary, INFINITY)), code + 1);
    EXPECT_EQ(nvfp4_block_scale_code(std::nextafter(boundary, 0.0f)), code);
  }
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> log2_a(-20.0f, 11.3f);  // below 6 * 448 = 2^11.39
  for (int n = 0; n < 20000; ++n) {
    const float a = std::exp2(log2_a(rng));
    const uint8_t c = nvfp4_block_scale_code(a);
    ASSERT_GE(kE2M1Max * e4m3_decode(c), a) << a;
    if (c > 0) {
      ASSERT_LT(kE2M1Max * e4m3_decode(uint8_t(c - 1)), a) << a;
    }
  }
}

ref::HostTensor random_tensor(int tokens, int heads, int dim, std::mt19937& rng) {
  ref::HostTensor x(tokens, heads, dim);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-12, 12);
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const float token_scale = std::exp2(float(binade(rng)));
      for (int d = 0; d < dim; ++d) {
        // a zero block, and blocks far below the token's largest (E4M3 subnormal scales)
        const int block = d / kNvfp4BlockElements;
        const float block_scale = block == 1 ? 0.0f : block == 2 ? 1e-6f : 1.0f;
        x.set(t, h, d, normal(rng) * token_scale * block_scale);
      }
    }
  return x;
}

// Every element within half an E2M1 step of its scaled value, none saturated, the exponent the
// E4M3 rule's minus 2, and each block scale the smallest that holds the block.
TEST(Nvfp4, QuantizedTensorIsWithinHalfAStep) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int tokens = 37, heads = 3, dim = 128;
  const ref::HostTensor x = random_tensor(tokens, heads, dim, rng);
  const ref::ElementSource source = [&](int t, int h, int d) { return x.at(t, h, d); };
  const ref::Fp8Tensor fp8 =
      ref::quantize(source, tokens, heads, dim, ref::scale_blocks({0, tokens}, ScaleMode::kExact));
  const ref::Nvfp4Tensor q = ref::quantize_nvfp4(source, fp8);
  EXPECT_FALSE(q.non_finite);
  double diff = 0.0, norm = 0.0;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      float token_amax = 0.0f;
      for (int d = 0; d < dim; ++d) token_amax = std::max(token_amax, std::fabs(x.at(t, h, d)));
      ASSERT_EQ(q.exponent(t, h), scale_exponent(token_amax) - kNvfp4ExponentOffset);
      for (int d0 = 0; d0 < dim; d0 += kNvfp4BlockElements) {
        float amax = 0.0f;
        for (int d = d0; d < d0 + kNvfp4BlockElements; ++d)
          amax = std::max(amax, std::fabs(x.at(t, h, d)));
        const float scaled_amax = amax * exp2_int(-q.exponent(t, h));
        const uint8_t scale = q.block_scale(t, h, d0);
        ASSERT_GE(kE2M1Max * e4m3_decode(scale), scaled_amax);
        if (scale > 0) {
          ASSERT_LT(kE2M1Max * e4m3_decode(uint8_t(scale - 1)), scaled_amax);
        }
        for (int d = d0; d < d0 + kNvfp4BlockElements; ++d) {
          const double unit = double(e4m3_decode(scale)) * std::exp2(q.exponent(t, h));
          const double y = unit == 0.0 ? 0.0 : double(x.at(t, h, d)) / unit;
          const double got = e2m1_decode(q.codes[q.element(t, h, d)]);
          const double half_step = std::fabs(y) <= 2.0 ? 0.25 : std::fabs(y) <= 4.0 ? 0.5 : 1.0;
          ASSERT_LE(std::fabs(y), kE2M1Max * (1.0 + 1e-6)) << "saturated";
          ASSERT_LE(std::fabs(got - y), half_step * (1.0 + 1e-6)) << t << " " << h << " " << d;
          diff += std::pow(double(q.dequantized(t, h, d)) - x.at(t, h, d), 2);
          norm += std::pow(double(x.at(t, h, d)), 2);
        }
      }
    }
  // 4-bit elements with a scale per 16: ~10% relative error on Gaussian rows (E4M3: ~2.5%)
  EXPECT_LT(std::sqrt(diff / norm), 0.15);
  EXPECT_GT(std::sqrt(diff / norm), 0.03);
}

// Inputs both formats hold exactly: every 16-element block is {0, ±0.5, ..., ±6} 2^k with a
// largest magnitude 6 2^k, and the token's largest block at 6 2^k0 with its others within E4M3's
// range of it. Then Q̃ = Q̂ as values, S is the same number, and every output is bit-equal.
ref::HostTensor representable_tensor(int tokens, int heads, int dim, std::mt19937& rng,
                                     int largest_binade = 3) {
  ref::HostTensor x(tokens, heads, dim);
  std::uniform_int_distribution<int> code(0, 15), shift(0, 6), token_binade(-3, largest_binade);
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const int k0 = token_binade(rng);
      for (int d0 = 0; d0 < dim; d0 += kNvfp4BlockElements) {
        const int k = d0 == 0 ? k0 : k0 - shift(rng);
        for (int d = d0; d < d0 + kNvfp4BlockElements; ++d) {
          const float value = d == d0 ? kE2M1Max : e2m1_decode(uint8_t(code(rng)));
          x.set(t, h, d, value * std::exp2(float(k)));
        }
      }
    }
  return x;
}

TEST(Nvfp4, ScoresOfRepresentableInputsMatchFp8BitForBit) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32, ScaleMode::kStatic}) {
    ref::Problem p = ref::make_problem({1, 17, 113, 0, 70}, 4, 2, 64, true, mode);
    ref::Inputs in = ref::make_inputs(p, {rng()});
    in.q = representable_tensor(p.total_q(), p.heads_q, p.head_dim, rng);
    // static: K within 448 * 2^ek (kDefaultStaticExponent -5: |k| <= 6), FP8 saturates beyond
    const int largest_k_binade = mode == ScaleMode::kStatic ? 0 : 3;
    in.k = representable_tensor(p.total_k(), p.heads_kv, p.head_dim, rng, largest_k_binade);
    const ref::ForwardResult f8 = ref::forward(p, in);
    const ref::BackwardResult g8 = ref::backward(p, in, f8.o_bf16, f8.softmax_stats);
    p.score_format = ref::ScoreFormat::kNvfp4;
    const ref::ForwardResult f4 = ref::forward(p, in);
    const ref::BackwardResult g4 = ref::backward(p, in, f4.o_bf16, f4.softmax_stats);
    EXPECT_EQ(f4.o_bf16.bits, f8.o_bf16.bits) << ref::scale_mode_name(mode);
    EXPECT_EQ(0, std::memcmp(f4.lse.data(), f8.lse.data(), f8.lse.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(g4.dq.data(), g8.dq.data(), g8.dq.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(g4.dk.data(), g8.dk.data(), g8.dk.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(g4.dv.data(), g8.dv.data(), g8.dv.size() * sizeof(float)));
  }
}

// On general inputs NVFP4 scores are coarser: a larger error against float64 than FP8's, within
// bounds measured on N(0, 1) data (`flamia formats`: O 0.12 against FP8's 0.045).
TEST(Nvfp4, GeneralInputsCostAccuracyWithinBounds) {
  ref::Problem p = ref::make_problem({1, 17, 113, 300}, 4, 2, 128);
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ref::Inputs in = ref::make_inputs(p, {seed});
  const ref::Float64Result exact = ref::float64_attention(p, in, true);
  const ref::ForwardResult f8 = ref::forward(p, in);
  p.score_format = ref::ScoreFormat::kNvfp4;
  const ref::ForwardResult f4 = ref::forward(p, in);
  const ref::BackwardResult g4 = ref::backward(p, in, f4.o_bf16, f4.softmax_stats);
  const double o8 = ref::rel_l2(f8.o_bf16.to_float(), exact.o);
  const double o4 = ref::rel_l2(f4.o_bf16.to_float(), exact.o);
  EXPECT_GT(o4, 1.5 * o8);
  EXPECT_LT(o4, 0.2);
  EXPECT_LT(ref::rel_l2(g4.dq, exact.dq), 0.25);
  EXPECT_LT(ref::rel_l2(g4.dk, exact.dk), 0.25);
  EXPECT_LT(ref::rel_l2(g4.dv, exact.dv), 0.2);
}

// The backward recomputes the forward's NVFP4 S (matched numerics, numerics §5 and §9): then dS
// rows sum to ~0 as in FP8 (D comes from O), measured as sum_rows |sum_j dS_ij| over
// sum_rows sum_j |dS_ij|. A backward that recomputed S from other operands than the forward's
// leaves the rows off (a review's mutant: FP8 S in the backward).
TEST(Nvfp4, BackwardRecomputesTheForwardsScores) {
  ref::Problem p = ref::make_problem({17, 113, 300}, 2, 1, 64);
  p.score_format = ref::ScoreFormat::kNvfp4;
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ref::Inputs in = ref::make_inputs(p, {seed});
  const ref::ForwardResult f = ref::forward(p, in);
  double residual = 0.0, magnitude = 0.0;
  for (int h = 0; h < p.heads_q; ++h)
    for (int doc = 0; doc < p.batch(); ++doc) {
      const int n = p.cu_seqlens_q[doc + 1] - p.cu_seqlens_q[doc];
      const std::vector<float> ds = ref::internal::score_gradient(p, in, f.o_bf16, f.softmax_stats,
                                                                  BackwardPrecision::kFp8, h, doc);
      for (int i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int j = 0; j < n; ++j) {
          sum += ds[size_t(i) * n + j];
          magnitude += std::fabs(ds[size_t(i) * n + j]);
        }
        residual += std::fabs(sum);
      }
    }
  // measured 3.1-3.8e-4 over 40 seeds; the mutant 0.025-0.029
  EXPECT_LT(residual / magnitude, 0.005);
}

// Operand-level causality of e' and the block scales: changing later tokens of a document, or
// other documents, by 2^+-20 or a redraw leaves every earlier token's NVFP4 codes, block scales
// and e' bitwise unchanged (exact, static; block32: other documents). The output audit cannot
// see a leaking e' while the block scales stay normal (the values do not change).
TEST(Nvfp4, ScalesOfEarlierTokensIgnoreLaterTokensAndOtherDocuments) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<int> docs = {40, 77, 130};
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kStatic, ScaleMode::kBlock32}) {
    ref::Problem p = ref::make_problem(docs, 4, 2, 64, true, mode);
    p.score_format = ref::ScoreFormat::kNvfp4;
    const ref::Inputs base = ref::make_inputs(p, {rng()});
    const ref::ForwardOperandsRef ops = ref::quantize_forward_operands(p, base);
    const int doc = 1, begin = p.cu_seqlens_q[doc];
    // block32 shares a block with later tokens of the document (numerics §2): only the rows
    // before the perturbed ones' block count there.
    const int split = mode == ScaleMode::kBlock32 ? begin + 32 : begin + 33;
    for (float factor : {0x1p20f, 0x1p-20f, 0.0f}) {
      ref::Inputs in = base;
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (ref::HostTensor* x : {&in.q, &in.k})
        for (int t = 0; t < x->tokens; ++t) {
          if (t >= begin && t < split) continue;
          for (int h = 0; h < x->heads; ++h)
            for (int d = 0; d < x->dim; ++d)
              x->set(t, h, d, factor == 0.0f ? normal(rng) : x->at(t, h, d) * factor);
        }
      const ref::ForwardOperandsRef moved = ref::quantize_forward_operands(p, in);
      for (const auto& [a, b] :
           {std::pair{&ops.q_scores, &moved.q_scores}, std::pair{&ops.k_scores, &moved.k_scores}})
        for (int t = begin; t < split; ++t)
          for (int h = 0; h < a->heads; ++h) {
            ASSERT_EQ(a->exponent(t, h), b->exponent(t, h)) << t << " " << h;
            for (int d = 0; d < a->dim; ++d) {
              ASSERT_EQ(a->codes[a->element(t, h, d)], b->codes[b->element(t, h, d)]) << t;
              ASSERT_EQ(a->block_scale(t, h, d), b->block_scale(t, h, d)) << t;
            }
          }
    }
  }
}

TEST(Nvfp4, ExactAndBlock32StayCausal) {
  ref::AuditWorkload w;
  w.score_format = ref::ScoreFormat::kNvfp4;
  const ref::AuditResult exact = ref::audit_forward(ref::AuditMode::kExact, w);
  EXPECT_EQ(exact.changed, 0);
  EXPECT_GT(exact.compared, 0);
  EXPECT_EQ(ref::audit_forward(ref::AuditMode::kBlock32, w).cross_document_changed, 0);
  EXPECT_GT(ref::audit_forward(ref::AuditMode::kUnsafe, w).changed, 0);  // the audit can fail
  EXPECT_EQ(ref::audit_backward_cross_document(ScaleMode::kExact, w).changed, 0);
}

bool all_nan(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isnan(v)) return false;
  return !x.empty();
}

// E2M1 has no NaN or Inf: either in q or k makes every output NaN (not a finite wrong value).
TEST(Nvfp4, NonFiniteScoreInputsMakeEveryOutputNan) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY})
    for (bool in_keys : {false, true}) {
      ref::Problem p = ref::make_problem({17, 40}, 2, 1, 64);
      p.score_format = ref::ScoreFormat::kNvfp4;
      ref::Inputs in = ref::make_inputs(p, {7});
      (in_keys ? in.k : in.q).set(20, 0, 5, bad);
      const ref::ForwardResult f = ref::forward(p, in);
      const ref::BackwardResult g = ref::backward(p, in, f.o_bf16, f.softmax_stats);
      EXPECT_TRUE(all_nan(f.o) && all_nan(f.lse)) << bad << " " << in_keys;
      EXPECT_TRUE(all_nan(g.dq) && all_nan(g.dk) && all_nan(g.dv)) << bad << " " << in_keys;
    }
}

TEST(Nvfp4, UnsupportedUsesAreRejected) {
  ref::Problem p = ref::make_problem({5}, 1, 1, 72);
  EXPECT_NO_THROW(ref::validate(p));
  p.score_format = ref::ScoreFormat::kNvfp4;
  EXPECT_THROW(ref::validate(p), std::invalid_argument);  // blocks of 16 along the head dim
  ref::Problem q = ref::make_problem({5}, 1, 1, 64);
  q.score_format = ref::ScoreFormat::kNvfp4;
  EXPECT_THROW(ref::api_problem(q, nullptr, nullptr), std::invalid_argument);  // no FP4 kernel
}

}  // namespace
}  // namespace flamia
