// Seeded random BF16 inputs, including inputs that random N(0,1) tests never exercise: a large
// common key component (key bias), an attention sink and tokens with much smaller values.
#include <cmath>
#include <random>

#include "reference/attention_ref.h"

namespace flamia::ref {

namespace {

// How far above the other logits a sink key sits (in natural-log units of the softmax).
constexpr float kSinkLogit = 10.0f;
// A sink's value is small, as in trained models.
constexpr float kSinkValueScale = 0.1f;
// Stream offsets so the optional components do not shift the main draws.
constexpr uint64_t kKeyBiasStream = 0x6b65795f62696173ull;
constexpr uint64_t kSinkStream = 0x73696e6b5f746f6bull;
// Which tokens get small values (InputOptions::small_value_binades).
constexpr int kSmallValuePeriod = 8;
constexpr int kSmallValuePhase = 3;

std::vector<float> normal_vector(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& x : out) x = normal(rng);
  return out;
}

}  // namespace

Inputs make_inputs(const Problem& p, const InputOptions& options) {
  validate(p);
  const int dim = p.head_dim;
  Inputs in{HostTensor(p.total_q(), p.heads_q, dim), HostTensor(p.total_k(), p.heads_kv, dim),
            HostTensor(p.total_k(), p.heads_kv, dim), HostTensor(p.total_q(), p.heads_q, dim)};
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<float> bias =
      normal_vector(size_t(p.heads_kv) * dim, options.seed ^ kKeyBiasStream);
  const std::vector<float> sink =
      normal_vector(size_t(p.heads_kv) * dim, options.seed ^ kSinkStream);
  // A sink key a * u scores softmax_scale * a * |u|^2 ~ softmax_scale * a * dim against a query
  // carrying u.
  const float sink_key_factor = kSinkLogit / (p.softmax_scale * float(dim));

  std::vector<char> is_doc_start(size_t(p.total_k()), 0);
  for (int b = 0; b < p.batch(); ++b)
    if (p.cu_seqlens_k[b] < p.cu_seqlens_k[b + 1]) is_doc_start[p.cu_seqlens_k[b]] = 1;

  for (int t = 0; t < p.total_q(); ++t)
    for (int h = 0; h < p.heads_q; ++h)
      for (int d = 0; d < dim; ++d) {
        float x = normal(rng);
        if (options.sink_token) x += sink[size_t(p.kv_head(h)) * dim + d];
        in.q.set(t, h, d, x);
      }
  for (int t = 0; t < p.total_k(); ++t)
    for (int g = 0; g < p.heads_kv; ++g)
      for (int d = 0; d < dim; ++d) {
        float x = normal(rng);
        if (options.sink_token && is_doc_start[t]) x = sink_key_factor * sink[size_t(g) * dim + d];
        x += options.key_bias * bias[size_t(g) * dim + d];
        in.k.set(t, g, d, x);
      }
  for (int t = 0; t < p.total_k(); ++t) {
    const bool small = t % kSmallValuePeriod == kSmallValuePhase;
    const float token_scale = std::ldexp(1.0f, small ? -options.small_value_binades : 0);
    for (int g = 0; g < p.heads_kv; ++g)
      for (int d = 0; d < dim; ++d) {
        float x = normal(rng) * token_scale;
        if (options.sink_token && is_doc_start[t]) x *= kSinkValueScale;
        in.v.set(t, g, d, x);
      }
  }
  for (int t = 0; t < p.total_q(); ++t)
    for (int h = 0; h < p.heads_q; ++h)
      for (int d = 0; d < dim; ++d) in.d_o.set(t, h, d, normal(rng));
  return in;
}

}  // namespace flamia::ref
