// Non-finite inputs (numerics §7): an Inf in q, k, v or dO makes every output of the call NaN (E4M3
// has no Inf, and saturating it to ±448 would be a finite wrong value), in every scale mode; a NaN
// stays NaN where it reaches, and the outputs it does not reach stay finite.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/attention_ref.h"

namespace flamia::ref {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Tensor { kQ, kK, kV, kDo };

HostTensor& tensor_of(Inputs& in, Tensor which) {
  switch (which) {
    case Tensor::kQ:
      return in.q;
    case Tensor::kK:
      return in.k;
    case Tensor::kV:
      return in.v;
    case Tensor::kDo:
    default:
      return in.d_o;
  }
}

size_t count_nan(const std::vector<float>& x) {
  size_t n = 0;
  for (float v : x) n += std::isnan(v) ? 1 : 0;
  return n;
}

bool all_nan(const std::vector<float>& x) {
  return !x.empty() && count_nan(x) == x.size();
}

bool all_finite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

struct Case {
  ScaleMode mode;
  Tensor tensor;
  float value;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  static const char* kTensorNames[] = {"q", "k", "v", "dO"};
  const Case& c = info.param;
  return std::string(scale_mode_name(c.mode)) + "_" + kTensorNames[int(c.tensor)] +
         (std::isnan(c.value) ? "_nan"
          : c.value > 0       ? "_inf"
                              : "_minus_inf");
}

class NonFiniteInput : public ::testing::TestWithParam<Case> {
 protected:
  // Documents of 1, 17, 113 and 40 tokens, GQA 2:1; the value lands in document 2 (token 60 of
  // 131), head 1 (a KV head for k and v), channel 5.
  static constexpr int kToken = 1 + 17 + 60;
  Problem problem() const {
    return make_problem({1, 17, 113, 40}, 4, 2, 64, true, GetParam().mode);
  }
};

TEST_P(NonFiniteInput, InfMakesEveryOutputNanAndNanStaysWhereItReaches) {
  const Case& c = GetParam();
  const Problem p = problem();
  InputOptions options;
  options.seed = 11;
  Inputs in = make_inputs(p, options);
  const ForwardResult clean = forward(p, in);
  const BackwardResult clean_grads = backward(p, in, clean.o_bf16, clean.softmax_stats);
  ASSERT_TRUE(all_finite(clean.o) && all_finite(clean_grads.dq));  // the test can fail

  tensor_of(in, c.tensor).set(kToken, 1, 5, c.value);
  const ForwardResult f = forward(p, in);
  const BackwardResult b = backward(p, in, f.o_bf16, f.softmax_stats);
  if (std::isinf(c.value)) {
    if (c.tensor != Tensor::kDo) {
      EXPECT_TRUE(all_nan(f.o) && all_nan(f.lse) && all_nan(f.softmax_stats));
    }
    EXPECT_TRUE(all_nan(b.dq) && all_nan(b.dk) && all_nan(b.dv));
    return;
  }
  // A NaN: non-finite where it reaches, the other documents' outputs finite and unchanged.
  const std::vector<float>& outputs = c.tensor == Tensor::kDo ? b.dq : f.o;
  EXPECT_GT(count_nan(outputs), 0u) << "the NaN was dropped";
  EXPECT_LT(count_nan(outputs), outputs.size()) << "a NaN is not an Inf: it stays local";
  const size_t first_doc_row = size_t(p.heads_q) * p.head_dim;  // document 0: token 0
  for (size_t x = 0; x < first_doc_row; ++x)
    EXPECT_EQ(outputs[x], c.tensor == Tensor::kDo ? clean_grads.dq[x] : clean.o[x]);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32, ScaleMode::kStatic})
    for (Tensor t : {Tensor::kQ, Tensor::kK, Tensor::kV, Tensor::kDo})
      for (float value : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()})
        all.push_back({mode, t, value});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Reference, NonFiniteInput, ::testing::ValuesIn(cases()), case_name);

// A problem with an empty side needs no values (numerics §4 step 9): the API quantizes nothing,
// and the reference looks for no Inf either. No keys: O = 0, LSE = -inf; no queries: dK = dV = 0.
TEST(NonFiniteInput, EmptySideLooksForNoInf) {
  Problem no_keys = make_problem({3, 5}, 2, 1, 64, false);
  no_keys.cu_seqlens_k = {0, 0, 0};
  InputOptions options;
  options.seed = 5;
  Inputs in = make_inputs(no_keys, options);
  in.q.set(2, 1, 7, kInf);
  const ForwardResult f = forward(no_keys, in);
  for (float o : f.o) EXPECT_EQ(o, 0.0f);
  for (float lse : f.lse) EXPECT_TRUE(std::isinf(lse) && lse < 0);

  Problem no_queries = make_problem({3, 5}, 2, 1, 64, false);
  no_queries.cu_seqlens_q = {0, 0, 0};
  Inputs in2 = make_inputs(no_queries, options);
  in2.k.set(4, 0, 1, -kInf);
  const ForwardResult f2 = forward(no_queries, in2);
  const BackwardResult b = backward(no_queries, in2, f2.o_bf16, f2.softmax_stats);
  for (float x : b.dk) EXPECT_EQ(x, 0.0f);
  for (float x : b.dv) EXPECT_EQ(x, 0.0f);
}

// The flag itself: quantize and quantize_static mark a tensor with an Inf anywhere, whatever the
// block, and never one with a NaN or only finite values (FP32's largest included).
TEST(NonFiniteInput, QuantizeMarksInfinity) {
  const std::vector<TokenBlock> blocks = {{0, 3}, {3, 4}};
  for (float special :
       {kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()}) {
    const ElementSource source = [&](int t, int h, int d) {
      return t == 3 && h == 1 && d == 2 ? special : 0.25f * float(t + d);
    };
    const bool expected = std::isinf(special);
    EXPECT_EQ(quantize(source, 4, 2, 8, blocks).infinite, expected) << special;
    EXPECT_EQ(quantize_static(source, 4, 2, 8, {0, 3}).infinite, expected) << special;
  }
}

// A finite dO whose dO'' = dO * fl(1/l) overflows is an Inf the backward's dO job finds (numerics
// §7, like k - k_first's overflow): every gradient NaN, not a block of ±448 and flushed zeros.
// Values ~2^100 give ev ~ 93, so l <= 40 * 448 * 2^-93 ~ 2^-79, and dO = 2^60 overflows; the
// same problem with an ordinary dO stays finite.
TEST(NonFiniteInput, ScaledOutputGradientOverflowMakesGradientsNan) {
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
    const Problem p = make_problem({1, 17, 40}, 2, 1, 64, true, mode);
    Inputs in = make_inputs(p, {5});
    for (int t = 0; t < p.total_k(); ++t)
      for (int d = 0; d < p.head_dim; ++d) in.v.set(t, 0, d, in.v.at(t, 0, d) * 0x1p100f);
    const ForwardResult f = forward(p, in);
    ASSERT_TRUE(all_finite(f.o)) << scale_mode_name(mode);
    const BackwardResult finite = backward(p, in, f.o_bf16, f.softmax_stats);
    EXPECT_TRUE(all_finite(finite.dq) && all_finite(finite.dk) && all_finite(finite.dv));
    in.d_o.set(30, 1, 7, 0x1p60f);
    const BackwardResult g = backward(p, in, f.o_bf16, f.softmax_stats);
    EXPECT_TRUE(all_nan(g.dq) && all_nan(g.dk) && all_nan(g.dv)) << scale_mode_name(mode);
  }
}

}  // namespace
}  // namespace flamia::ref
