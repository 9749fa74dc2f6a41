// NVFP4 (numerics §9, the mixed path of Q·Kᵀ in the CPU reference): E2M1 against a brute-force
// oracle, the block-scale rule's minimality, quantization bounds, the reference's scores on
// inputs both formats hold exactly (bit-equal outputs), causality, and non-finite inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/nvfp4_numerics.h"
#include "reference/api_problem.h"
#include "reference/attention_ref.h"
#include "reference/audit.h"

namespace flamia {
namespace {

constexpr int kE2M1Codes = 16;
constexpr float kE2M1Values[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Nearest E2M1 magnitude by exhaustive search, ties to the even code, satfinite.
uint8_t oracle_e2m1(float x) {
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
  for (float x : xs) EXPECT_EQ(e2m1_encode(x), oracle_e2m1(x)) << x;
  EXPECT_EQ(e2m1_encode(std::numeric_limits<float>::quiet_NaN()) & kE2M1MaxCode, 0);
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
  std::mt19937 rng(std::random_device{}());
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
  std::mt19937 rng(std::random_device{}());
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
ref::HostTensor representable_tensor(int tokens, int heads, int dim, std::mt19937& rng) {
  ref::HostTensor x(tokens, heads, dim);
  std::uniform_int_distribution<int> code(0, 15), shift(0, 6), token_binade(-3, 3);
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
  std::mt19937 rng(std::random_device{}());
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
    ref::Problem p = ref::make_problem({1, 17, 113, 0, 70}, 4, 2, 64, true, mode);
    ref::Inputs in = ref::make_inputs(p, {rng()});
    in.q = representable_tensor(p.total_q(), p.heads_q, p.head_dim, rng);
    in.k = representable_tensor(p.total_k(), p.heads_kv, p.head_dim, rng);
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
  const ref::Inputs in = ref::make_inputs(p, {std::random_device{}()});
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
