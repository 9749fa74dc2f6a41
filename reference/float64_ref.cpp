// Plain softmax attention in float64 on the BF16 inputs: the yardstick of every path's error.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/attention_internal.h"
#include "reference/attention_ref.h"

namespace flamia::ref {
namespace internal {

namespace {

constexpr int kRowsPerTask = 32;

std::vector<double> to_double(const HostTensor& x) {
  std::vector<double> out(x.bits.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(x.bits[i]);
  return out;
}

}  // namespace

Float64Inputs float64_inputs(const Inputs& in) {
  return {to_double(in.q), to_double(in.k), to_double(in.v), to_double(in.d_o)};
}

Float64Result float64_attention(const Problem& p, const Float64Inputs& in, bool with_backward) {
  validate(p);
  const int dim = p.head_dim, total_q = p.total_q(), total_k = p.total_k();
  const double scale = p.softmax_scale;
  auto q_row = [&](const std::vector<double>& x, int t, int h) {
    return &x[(size_t(t) * p.heads_q + h) * dim];
  };
  auto k_row = [&](const std::vector<double>& x, int t, int g) {
    return &x[(size_t(t) * p.heads_kv + g) * dim];
  };

  Float64Result r;
  r.o.assign(size_t(total_q) * p.heads_q * dim, 0.0);
  r.lse.assign(size_t(p.heads_q) * total_q, -std::numeric_limits<double>::infinity());
  if (with_backward) {
    r.dq.assign(r.o.size(), 0.0);
    r.dk.assign(size_t(total_k) * p.heads_kv * dim, 0.0);
    r.dv.assign(r.dk.size(), 0.0);
  }

  for (int h = 0; h < p.heads_q; ++h) {
    const int g = p.kv_head(h);
    // Per document [q_len][k_len] probabilities and score gradients (backward only).
    std::vector<std::vector<double>> prob(p.batch()), ds(p.batch());
    if (with_backward)
      for (int b = 0; b < p.batch(); ++b) {
        const size_t size = size_t(p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b]) *
                            (p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]);
        prob[b].assign(size, 0.0);
        ds[b].assign(size, 0.0);
      }
    const std::vector<RowChunk> q_chunks = row_chunks(p.cu_seqlens_q, {h}, kRowsPerTask);
    parallel_for(int(q_chunks.size()), [&](int item) {
      const RowChunk& chunk = q_chunks[item];
      const int k_begin = p.cu_seqlens_k[chunk.doc], q_begin = p.cu_seqlens_q[chunk.doc];
      const int k_len = p.cu_seqlens_k[chunk.doc + 1] - k_begin;
      std::vector<double> s(size_t(k_len) + 1);
      for (int i = chunk.begin; i < chunk.end; ++i) {
        const int n = visible_keys(p, chunk.doc, i);
        if (n <= 0) continue;
        double mx = -std::numeric_limits<double>::infinity();
        const int first = first_visible_key(p, chunk.doc, i);
        for (int jj = 0; jj < n; ++jj) {
          s[jj] = jj < first
                      ? -std::numeric_limits<double>::infinity()
                      : scale * dot_product(q_row(in.q, i, h), k_row(in.k, k_begin + jj, g), dim);
          mx = std::max(mx, s[jj]);
        }
        double sum = 0.0;
        for (int jj = 0; jj < n; ++jj) sum += std::exp(s[jj] - mx);
        double* o = &r.o[(size_t(i) * p.heads_q + h) * dim];
        for (int jj = 0; jj < n; ++jj) {
          const double pij = std::exp(s[jj] - mx) / sum;
          s[jj] = pij;
          const double* v = k_row(in.v, k_begin + jj, g);
          for (int d = 0; d < dim; ++d) o[d] += pij * v[d];
        }
        r.lse[size_t(h) * total_q + i] = mx + std::log(sum);
        if (!with_backward) continue;
        const double* d_o = q_row(in.d_o, i, h);
        const double delta = dot_product(d_o, o, dim);
        double* prob_row = &prob[chunk.doc][size_t(i - q_begin) * k_len];
        double* ds_row = &ds[chunk.doc][size_t(i - q_begin) * k_len];
        for (int jj = 0; jj < n; ++jj) {
          const double dp = dot_product(d_o, k_row(in.v, k_begin + jj, g), dim);
          prob_row[jj] = s[jj];
          ds_row[jj] = s[jj] * (dp - delta);
        }
      }
    });
    if (!with_backward) continue;

    const std::vector<RowChunk> k_chunks = row_chunks(p.cu_seqlens_k, {h}, kRowsPerTask);
    const int dq_items = int(q_chunks.size());
    parallel_for(dq_items + int(k_chunks.size()), [&](int item) {
      const bool is_dq = item < dq_items;
      const RowChunk& chunk = is_dq ? q_chunks[item] : k_chunks[item - dq_items];
      const int b = chunk.doc;
      const int k_begin = p.cu_seqlens_k[b], q_begin = p.cu_seqlens_q[b];
      const int k_len = p.cu_seqlens_k[b + 1] - k_begin, q_len = p.cu_seqlens_q[b + 1] - q_begin;
      if (is_dq) {
        for (int t = chunk.begin; t < chunk.end; ++t) {
          double* dq = &r.dq[(size_t(t) * p.heads_q + h) * dim];
          const int n = visible_keys(p, b, t);  // dS is 0 past the diagonal
          for (int jj = 0; jj < n; ++jj) {
            const double w = scale * ds[b][size_t(t - q_begin) * k_len + jj];
            const double* k = k_row(in.k, k_begin + jj, g);
            for (int d = 0; d < dim; ++d) dq[d] += w * k[d];
          }
        }
        return;
      }
      // Keys [chunk.begin, chunk.end) together, query rows outermost: the dS and P rows are read
      // contiguously, and every key still adds its query rows in ascending order onto what the
      // previous heads of its group left (the same sums as one key at a time).
      const int keys = chunk.end - chunk.begin, first_key = chunk.begin - k_begin;
      std::vector<double> dk(size_t(keys) * dim), dv(size_t(keys) * dim);
      for (int t = 0; t < keys; ++t)
        for (int d = 0; d < dim; ++d) {
          dk[size_t(t) * dim + d] = r.dk[(size_t(chunk.begin + t) * p.heads_kv + g) * dim + d];
          dv[size_t(t) * dim + d] = r.dv[(size_t(chunk.begin + t) * p.heads_kv + g) * dim + d];
        }
      for (int ii = p.causal ? first_key : 0; ii < q_len; ++ii) {
        const double* ds_row = &ds[b][size_t(ii) * k_len + first_key];
        const double* prob_row = &prob[b][size_t(ii) * k_len + first_key];
        const double* q = q_row(in.q, q_begin + ii, h);
        const double* d_o = q_row(in.d_o, q_begin + ii, h);
        for (int t = 0; t < keys; ++t) {
          const double ds_scaled = scale * ds_row[t], pij = prob_row[t];
          double* dk_t = &dk[size_t(t) * dim];
          double* dv_t = &dv[size_t(t) * dim];
          for (int d = 0; d < dim; ++d) {
            dk_t[d] += ds_scaled * q[d];
            dv_t[d] += pij * d_o[d];
          }
        }
      }
      for (int t = 0; t < keys; ++t) {
        double* dk_out = &r.dk[(size_t(chunk.begin + t) * p.heads_kv + g) * dim];
        double* dv_out = &r.dv[(size_t(chunk.begin + t) * p.heads_kv + g) * dim];
        for (int d = 0; d < dim; ++d) {
          dk_out[d] = dk[size_t(t) * dim + d];
          dv_out[d] = dv[size_t(t) * dim + d];
        }
      }
    });
  }
  return r;
}

}  // namespace internal

Float64Result float64_attention(const Problem& problem, const Inputs& inputs, bool with_backward) {
  return internal::float64_attention(problem, internal::float64_inputs(inputs), with_backward);
}

}  // namespace flamia::ref
