// The reference forward (numerics §4): one query row at a time, with the final M.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/attention_internal.h"
#include "reference/attention_ref.h"

namespace flamia::ref {
namespace internal {

namespace {
constexpr int kRowsPerTask = 32;
}  // namespace

ScoreOperands::ScoreOperands(const Problem& problem, const ForwardOperandsRef& operands)
    : p(problem),
      ops(operands),
      q(decode_head_major(operands.q)),
      v(decode_head_major(operands.v)),
      c(problem.softmax_scale * kLog2e) {
  const bool nvfp4 = problem.score_format == ScoreFormat::kNvfp4;
  if (nvfp4) nvfp4_q = decode_head_major(operands.q_scores);
  score_q = nvfp4 ? &nvfp4_q : &q;
  score_k = nvfp4 ? decode_head_major(operands.k_scores) : decode_head_major(operands.k);
}

int ScoreOperands::score_q_exponent(int i, int h) const {
  return p.score_format == ScoreFormat::kNvfp4 ? ops.q_scores.exponent(i, h) : ops.q.exponent(i, h);
}

int ScoreOperands::score_k_exponent(int j, int g) const {
  return p.score_format == ScoreFormat::kNvfp4 ? ops.k_scores.exponent(j, g) : ops.k.exponent(j, g);
}

namespace {
// The factor of step 2: (c * 2^eq_i) * 2^ek_j in FP32, rounded once; kStatic's is clamped to
// FP32's normal range (static_row_factor).
float score_factor(const Problem& p, float row_factor, int key_exponent) {
  const float key_scale = exp2_int(key_exponent);
  return p.scale_mode == ScaleMode::kStatic ? static_row_factor(row_factor, key_scale)
                                            : row_factor * key_scale;
}
}  // namespace

void ScoreOperands::logits(int h, int i, int k_begin, int n, float* t, float* s) const {
  const int dim = p.head_dim;
  const int g = p.kv_head(h);
  const float row_factor = c * exp2_int(score_q_exponent(i, h));
  const double* q_row = &(*score_q)[(size_t(h) * p.total_q() + i) * dim];
  for (int jj = 0; jj < n; ++jj) {
    const int j = k_begin + jj;
    s[jj] = float(dot_product(q_row, &score_k[(size_t(g) * p.total_k() + j) * dim], dim));
    const float factor = score_factor(p, row_factor, score_k_exponent(j, g));
    t[jj] = std::fma(s[jj], factor, float(ops.v.exponent(j, g)));
  }
}

float ScoreOperands::shifted_exp2(int h, int i, int j, float t, float s, float m) const {
  if (t == -std::numeric_limits<float>::infinity()) return 0.0f;  // masked
  if (p.scale_mode != ScaleMode::kStatic) return std::exp2((t - m) + float(kSoftmaxOffset));
  const int g = p.kv_head(h);
  const float factor =
      score_factor(p, c * exp2_int(score_q_exponent(i, h)), score_k_exponent(j, g));
  const float bias = float(ops.v.exponent(j, g)) - (m - float(kSoftmaxOffset));  // exact
  return std::exp2(std::fma(s, factor, bias));
}

ForwardResult forward(const Problem& p, const Inputs& in, const QuantizationHooks& hooks) {
  const ForwardOperandsRef ops = quantize_forward_operands(p, in, hooks);
  const ScoreOperands score(p, ops);
  const int dim = p.head_dim;
  const int total_q = p.total_q();

  ForwardResult r;
  r.o.assign(size_t(total_q) * p.heads_q * dim, 0.0f);
  r.lse.assign(size_t(p.heads_q) * total_q, -std::numeric_limits<float>::infinity());
  r.softmax_stats.assign(size_t(p.heads_q) * total_q * 2, 0.0f);

  std::vector<int> heads(p.heads_q);
  for (int h = 0; h < p.heads_q; ++h) heads[h] = h;
  const std::vector<RowChunk> chunks = row_chunks(p.cu_seqlens_q, heads, kRowsPerTask);
  const int max_keys = max_document_length(p.cu_seqlens_k);

  parallel_for(int(chunks.size()), [&](int item) {
    const RowChunk& chunk = chunks[item];
    const int h = chunk.head, g = p.kv_head(h);
    const int k_begin = p.cu_seqlens_k[chunk.doc];
    std::vector<float> t(size_t(max_keys) + 1), s(size_t(max_keys) + 1);
    std::vector<double> acc(dim);
    for (int i = chunk.begin; i < chunk.end; ++i) {
      const int n = visible_keys(p, chunk.doc, i);
      if (n <= 0) continue;  // §4 step 9: O = 0, LSE = -inf, stats {0, 0} (already set)
      score.logits(h, i, k_begin, n, t.data(), s.data());
      mask_before_window(t.data(), first_visible_key(p, chunk.doc, i));
      const float m = std::ceil(*std::max_element(t.begin(), t.begin() + n));
      double l = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int jj = 0; jj < n; ++jj) {
        const int j = k_begin + jj;
        const float e = score.shifted_exp2(h, i, j, t[jj], s[jj], m);
        const double p_hat = e4m3_decode(e4m3_encode(e));
        if (p_hat == 0.0) continue;
        l += p_hat * exp2_int(-ops.v.exponent(j, g));  // §4 step 5: the quantized P̂ (exact)
        const double* v_row = &score.v[(size_t(g) * p.total_k() + j) * dim];
        for (int d = 0; d < dim; ++d) acc[d] += p_hat * v_row[d];  // exact: E4M3 x E4M3
      }
      const float l32 = float(l);
      float* o_row = &r.o[(size_t(i) * p.heads_q + h) * dim];
      for (int d = 0; d < dim; ++d) o_row[d] = float(acc[d]) / l32;
      float lse = std::log(l32) + (m - float(kSoftmaxOffset)) * kLn2;
      if (!ops.lse_shift.empty()) lse += ops.lse_shift[size_t(h) * total_q + i];
      r.lse[size_t(h) * total_q + i] = lse;
      r.softmax_stats[(size_t(h) * total_q + i) * 2] = m;
      r.softmax_stats[(size_t(h) * total_q + i) * 2 + 1] = l32;
    }
  });

  // §7: what the poison writes. With an empty side the outputs are defined without the other
  // side's values (§4 step 9), and nothing is quantized: no Inf is looked for.
  if (ops.infinite_input() && total_q > 0 && p.total_k() > 0) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (auto* values : {&r.o, &r.lse, &r.softmax_stats})
      std::fill(values->begin(), values->end(), nan);
  }
  r.o_bf16 = HostTensor(total_q, p.heads_q, dim);
  for (size_t x = 0; x < r.o.size(); ++x) r.o_bf16.bits[x] = float_to_bf16(r.o[x]);
  return r;
}

}  // namespace internal

ForwardResult forward(const Problem& problem, const Inputs& inputs) {
  return internal::forward(problem, inputs, {});
}

}  // namespace flamia::ref
