// flamia_forward_args.kv_amax through the public C API: each KV head's max |k - m| (the keys as
// quantized, m the key smoothing's vector or first key) and max |v| over all tokens, against
// the same FP32 operations on the host, bit for bit: in every scale mode and smoothing, with
// GQA, both head dims, awkward documents, with and without saved operands, and with the
// forward overlapped per chunk of heads or not. The output is poisoned before every run; a
// problem without keys gives zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "api_problem_runner.h"
#include "forward_cases.h"
#include "flamia/flamia.h"
#include "gpu_test_utils.h"
#include "reference/attention_ref.h"

namespace flamia::test {
namespace {

// The expected (2, heads_kv) maxima: the quantize pass's own FP32 operations (x - m, |.|, max).
std::vector<float> host_kv_amax(const ref::Problem& p, const ref::Inputs& in) {
  std::vector<float> amax(size_t(2) * p.heads_kv, 0.0f);
  const int d = p.head_dim;
  auto value = [&](const ref::HostTensor& t, int token, int head, int c) {
    return ref::bf16_to_float(t.bits[(size_t(token) * p.heads_kv + head) * d + c]);
  };
  for (int b = 0; b + 1 < int(p.cu_seqlens_k.size()); ++b) {
    const int first = p.cu_seqlens_k[b];
    for (int t = first; t < p.cu_seqlens_k[b + 1]; ++t)
      for (int h = 0; h < p.heads_kv; ++h)
        for (int c = 0; c < d; ++c) {
          float m = 0.0f;
          if (p.key_smoothing == KeySmoothing::kFirstKey) m = value(in.k, first, h, c);
          if (p.key_smoothing == KeySmoothing::kVector) m = p.smoothing_vector[size_t(h) * d + c];
          amax[h] = std::fmax(amax[h], std::fabs(value(in.k, t, h, c) - m));
          amax[p.heads_kv + h] = std::fmax(amax[p.heads_kv + h], std::fabs(value(in.v, t, h, c)));
        }
  }
  return amax;
}

class ForwardAmaxTest : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardAmaxTest, EqualsTheHostsMaxima) {
  FLAMIA_REQUIRE_SM90();
  const ForwardCase& c = GetParam();
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  const std::vector<float> expected = host_kv_amax(problem, inputs);
  ApiProblem device(problem, inputs);
  if (problem.total_k() == 0)  // a problem without keys still declares a longest document
    device.mutate_problem([](flamia_problem& p) { p.max_seqlen_k = 1; });
  for (const char* overlap : {"off", "2:8"}) {
    for (bool keep : {false, true}) {
      SCOPED_TRACE(std::string("FLAMIA_FORWARD_OVERLAP=") + overlap +
                   (keep ? ", keeping operands" : ""));
      {
        const OverlapSetting setting(overlap);
        device.forward(keep);
      }
      const std::vector<float> amax = device.kv_amax();
      ASSERT_EQ(amax.size(), expected.size());
      for (size_t i = 0; i < amax.size(); ++i) {
        EXPECT_EQ(std::memcmp(&amax[i], &expected[i], sizeof(float)), 0)
            << (i < size_t(problem.heads_kv) ? "K" : "V") << " head " << i % problem.heads_kv
            << ": " << amax[i] << " (expected " << expected[i] << ")";
      }
    }
  }
}

std::vector<ForwardCase> amax_cases() {
  const std::vector<int> long_docs = {300, 17, 1, 2049, 0, 700};
  const std::vector<int> awkward = {130, 7, 0, 700, 64, 1, 113};
  using M = ScaleMode;
  using S = KeySmoothing;
  return {
      {"d128_exact_gqa4", long_docs, {}, 16, 4, 128, true, M::kExact, S::kNone},
      {"d64_static_gqa2", awkward, {}, 8, 4, 64, true, M::kStatic, S::kNone},
      {"d128_static_first_key", awkward, {}, 4, 4, 128, true, M::kStatic, S::kFirstKey},
      {"d128_block32_vector", long_docs, {}, 6, 3, 128, true, M::kBlock32, S::kVector},
      {"d64_exact_first_key_mqa", awkward, {}, 4, 1, 64, true, M::kExact, S::kFirstKey},
      {"d128_full_cross", {5, 64, 1, 30}, {64, 3, 0, 100}, 4, 2, 128, false, M::kExact, S::kNone},
      {"d128_no_keys", {5, 9}, {0, 0}, 4, 2, 128, false, M::kStatic, S::kNone},
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, ForwardAmaxTest, ::testing::ValuesIn(amax_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flamia::test
