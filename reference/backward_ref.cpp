// The reference backward (numerics §5). Per query head, in head order (so that the GQA sums of
// dK and dV are added in a fixed order): first the rows of dS and P̂ of every document, then
// dQ by query row and dK, dV by key row, each in its own tile-aligned dS blocks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/attention_internal.h"
#include "reference/attention_ref.h"

namespace flamia::ref {
namespace internal {

namespace {

constexpr int kRowsPerTask = 32;
constexpr int kDqKeyBlockTokens = 128;   // dS blocks of dQ: per (query row, 128-key block)
constexpr int kDkQueryBlockTokens = 64;  // dS blocks of dK: per (key row, 64-query block)

// BF16 tensor as doubles, [heads][tokens][dim].
std::vector<double> head_major(const HostTensor& x) {
  std::vector<double> out(x.bits.size());
  for (int t = 0; t < x.tokens; ++t)
    for (int h = 0; h < x.heads; ++h)
      for (int d = 0; d < x.dim; ++d) out[(size_t(h) * x.tokens + t) * x.dim + d] = x.at(t, h, d);
  return out;
}

// Blocks of `blocks` that lie in [begin, end), in order (the block lists are document-local).
std::vector<TokenBlock> blocks_within(const std::vector<TokenBlock>& blocks, int begin, int end) {
  std::vector<TokenBlock> out;
  for (const TokenBlock& b : blocks)
    if (b.begin >= begin && b.end <= end) out.push_back(b);
  return out;
}

struct Context {
  Context(const Problem& problem, const Inputs& in, const HostTensor& o,
          const std::vector<float>& softmax_stats, BackwardPrecision prec,
          const QuantizationHooks& quantization)
      : p(problem),
        stats(softmax_stats),
        precision(prec),
        hooks(quantization),
        fwd(quantize_forward_operands(problem, in, quantization)),
        bwd(quantize_backward_operands(problem, in, fwd, o, softmax_stats, quantization)),
        score(problem, fwd),
        d_o(decode_head_major(bwd.d_o)),
        k_centered(decode_head_major(bwd.k_centered)),
        d_o_scaled(decode_head_major(bwd.d_o_scaled)) {
    if (precision == BackwardPrecision::kFp8Bf16Grad) {
      q16 = head_major(in.q);
      k16 = head_major(in.k);
      v16 = head_major(in.v);
      d_o16 = head_major(in.d_o);
      if (!hooks.bf16grad_uncentered_keys) {
        // §5 step 10: dQ through a BF16 copy of k - k_first(doc).
        for (int b = 0; b < problem.batch(); ++b)
          for (int t = problem.cu_seqlens_k[b]; t < problem.cu_seqlens_k[b + 1]; ++t)
            for (int g = 0; g < problem.heads_kv; ++g)
              for (int d = 0; d < problem.head_dim; ++d)
                k16[(size_t(g) * problem.total_k() + t) * problem.head_dim + d] =
                    round_to_bf16(in.k.at(t, g, d) - in.k.at(problem.cu_seqlens_k[b], g, d));
      }
    }
    const std::vector<TokenBlock> key_blocks =
        tile_aligned_blocks(problem.cu_seqlens_k, kDqKeyBlockTokens);
    const std::vector<TokenBlock> query_blocks =
        tile_aligned_blocks(problem.cu_seqlens_q, kDkQueryBlockTokens);
    for (int b = 0; b < problem.batch(); ++b) {
      dq_key_blocks.push_back(
          blocks_within(key_blocks, problem.cu_seqlens_k[b], problem.cu_seqlens_k[b + 1]));
      dk_query_blocks.push_back(
          blocks_within(query_blocks, problem.cu_seqlens_q[b], problem.cu_seqlens_q[b + 1]));
    }
  }

  const double* row(const std::vector<double>& x, int head, int tokens, int t) const {
    return &x[(size_t(head) * tokens + t) * p.head_dim];
  }
  int q_len(int doc) const { return p.cu_seqlens_q[doc + 1] - p.cu_seqlens_q[doc]; }
  int k_len(int doc) const { return p.cu_seqlens_k[doc + 1] - p.cu_seqlens_k[doc]; }

  const Problem& p;
  const std::vector<float>& stats;
  BackwardPrecision precision;
  QuantizationHooks hooks;
  ForwardOperandsRef fwd;
  BackwardOperandsRef bwd;
  ScoreOperands score;
  std::vector<double> d_o, k_centered, d_o_scaled;  // decoded E4M3 copies, head-major
  std::vector<double> q16, k16, v16, d_o16;         // BF16 inputs (fp8-bf16grad only)
  std::vector<std::vector<TokenBlock>> dq_key_blocks, dk_query_blocks;  // per document
};

// Steps 1-5 for rows [begin, end) of document `doc`, head h: dS and the P̂ codes into the
// document's row-major [q_len][k_len] matrices (masked entries stay 0).
void score_gradient_rows(const Context& c, int h, int doc, int begin, int end, float* ds,
                         uint8_t* p_hat) {
  const Problem& p = c.p;
  const int dim = p.head_dim, g = p.kv_head(h);
  const int total_q = p.total_q(), total_k = p.total_k();
  const int q_begin = p.cu_seqlens_q[doc], k_begin = p.cu_seqlens_k[doc];
  const int k_len = c.k_len(doc);
  std::vector<float> t(size_t(k_len) + 1), s(size_t(k_len) + 1);
  for (int i = begin; i < end; ++i) {
    const int n = visible_keys(p, doc, i);
    const float m = c.stats[(size_t(h) * total_q + i) * 2];
    const float l = c.stats[(size_t(h) * total_q + i) * 2 + 1];
    if (n <= 0 || l == 0.0f) continue;  // fully masked row: no gradient
    c.score.logits(h, i, k_begin, n, t.data(), s.data());
    mask_before_window(t.data(), first_visible_key(p, doc, i));
    const bool delta_from_bf16 =
        c.precision == BackwardPrecision::kFp8Bf16Grad && !c.hooks.bf16grad_delta_from_fp8_d_o;
    const float delta = (delta_from_bf16 ? c.bwd.delta_bf16 : c.bwd.delta)[size_t(h) * total_q + i];
    const float do_scale = exp2_int(c.bwd.d_o.exponent(i, h));
    float* ds_row = ds + size_t(i - q_begin) * k_len;
    uint8_t* p_row = p_hat + size_t(i - q_begin) * k_len;
    for (int jj = 0; jj < n; ++jj) {
      const int j = k_begin + jj;
      const int ev = c.fwd.v.exponent(j, g);
      const float e = c.score.shifted_exp2(h, i, j, t[jj], s[jj], m);
      p_row[jj] = e4m3_encode(e);
      // step 2: the probability the forward's P̂·V̂ used (l sums the same P̂)
      const float prob = (float(e4m3_decode(p_row[jj])) * exp2_int(-ev)) / l;
      float dp;
      if (c.precision == BackwardPrecision::kFp8) {
        const double dot =
            dot_product(c.row(c.d_o, h, total_q, i), c.row(c.score.v, g, total_k, j), dim);
        dp = float(dot) * do_scale * exp2_int(ev);
      } else {
        // Deterministic double sum of BF16 products (not exact, but rounded once).
        dp = float(dot_product(c.row(c.d_o16, h, total_q, i), c.row(c.v16, g, total_k, j), dim));
      }
      const float grad = prob * (dp - delta);
      ds_row[jj] = c.precision == BackwardPrecision::kFp8 ? grad : round_to_bf16(grad);
    }
  }
}

// Step 7: dQ of rows [begin, end) through K̂c, one dS exponent per (row, 128-key block).
void dq_rows(const Context& c, int h, int doc, int begin, int end, const float* ds, float* dq) {
  const Problem& p = c.p;
  const int dim = p.head_dim, g = p.kv_head(h);
  const int total_k = p.total_k();
  const int q_begin = p.cu_seqlens_q[doc], k_begin = p.cu_seqlens_k[doc];
  const int k_len = c.k_len(doc);
  std::vector<double> acc(dim), block_acc(dim);
  for (int i = begin; i < end; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const float* ds_row = ds + size_t(i - q_begin) * k_len;
    if (c.precision == BackwardPrecision::kFp8Bf16Grad) {
      for (int jj = 0; jj < k_len; ++jj) {
        if (ds_row[jj] == 0.0f) continue;
        const double* k_row = c.row(c.k16, g, total_k, k_begin + jj);
        for (int d = 0; d < dim; ++d) acc[d] += double(ds_row[jj]) * k_row[d];
      }
    } else {
      for (const TokenBlock& block : c.dq_key_blocks[doc]) {
        float amax = 0.0f;
        for (int j = block.begin; j < block.end; ++j)
          amax = std::max(
              amax, std::fabs(ds_row[j - k_begin] * exp2_int(c.bwd.k_centered.exponent(j, g))));
        const int gq = c.hooks.scale_rule(amax);
        std::fill(block_acc.begin(), block_acc.end(), 0.0);
        for (int j = block.begin; j < block.end; ++j) {
          const float scaled = ds_row[j - k_begin] * exp2_int(c.bwd.k_centered.exponent(j, g));
          const double gij = e4m3_decode(quantize_e4m3(scaled, gq));
          if (gij == 0.0) continue;
          const double* kc_row = c.row(c.k_centered, g, total_k, j);
          for (int d = 0; d < dim; ++d) block_acc[d] += gij * kc_row[d];  // exact
        }
        const double block_scale = exp2_int(gq);
        for (int d = 0; d < dim; ++d) acc[d] += block_acc[d] * block_scale;
      }
    }
    float* out = dq + (size_t(i) * p.heads_q + h) * dim;
    for (int d = 0; d < dim; ++d) out[d] = float(double(p.softmax_scale) * acc[d]);
  }
}

// Steps 6 and 8 for key rows [begin, end) of document `doc`, head h: this head's dK and dV
// contributions, added to the KV head's double accumulators.
void dk_dv_rows(const Context& c, int h, int doc, int begin, int end, const float* ds,
                const uint8_t* p_hat, double* dk_acc, double* dv_acc) {
  const Problem& p = c.p;
  const int dim = p.head_dim, g = p.kv_head(h);
  const int total_q = p.total_q();
  const int q_begin = p.cu_seqlens_q[doc], k_begin = p.cu_seqlens_k[doc];
  const int q_len = c.q_len(doc), k_len = c.k_len(doc);
  std::vector<double> dk(dim), dv(dim), block_acc(dim);
  for (int j = begin; j < end; ++j) {
    const int jj = j - k_begin;
    std::fill(dk.begin(), dk.end(), 0.0);
    std::fill(dv.begin(), dv.end(), 0.0);
    // dV_j = 2^-ev_j * sum_i P̂_ij dÔ''_i 2^ew_i
    for (int ii = 0; ii < q_len; ++ii) {
      const uint8_t code = p_hat[size_t(ii) * k_len + jj];
      if (code == 0) continue;
      const int i = q_begin + ii;
      const double weight = double(e4m3_decode(code)) * exp2_int(c.bwd.d_o_scaled.exponent(i, h));
      const double* dos_row = c.row(c.d_o_scaled, h, total_q, i);
      for (int d = 0; d < dim; ++d) dv[d] += weight * dos_row[d];
    }
    if (c.precision == BackwardPrecision::kFp8Bf16Grad) {
      for (int ii = 0; ii < q_len; ++ii) {
        const float dsij = ds[size_t(ii) * k_len + jj];
        if (dsij == 0.0f) continue;
        const double* q_row = c.row(c.q16, h, total_q, q_begin + ii);
        for (int d = 0; d < dim; ++d) dk[d] += double(dsij) * q_row[d];
      }
    } else {
      for (const TokenBlock& block : c.dk_query_blocks[doc]) {
        float amax = 0.0f;
        for (int i = block.begin; i < block.end; ++i)
          amax = std::max(amax, std::fabs(ds[size_t(i - q_begin) * k_len + jj] *
                                          exp2_int(c.fwd.q.exponent(i, h))));
        const int gk = c.hooks.scale_rule(amax);
        std::fill(block_acc.begin(), block_acc.end(), 0.0);
        for (int i = block.begin; i < block.end; ++i) {
          const float scaled =
              ds[size_t(i - q_begin) * k_len + jj] * exp2_int(c.fwd.q.exponent(i, h));
          const double hji = e4m3_decode(quantize_e4m3(scaled, gk));
          if (hji == 0.0) continue;
          const double* q_row = c.row(c.score.q, h, total_q, i);
          for (int d = 0; d < dim; ++d) block_acc[d] += hji * q_row[d];  // exact
        }
        const double block_scale = exp2_int(gk);
        for (int d = 0; d < dim; ++d) dk[d] += block_acc[d] * block_scale;
      }
    }
    const double v_scale = exp2_int(-c.fwd.v.exponent(j, g));
    double* dk_out = dk_acc + (size_t(j) * p.heads_kv + g) * dim;
    double* dv_out = dv_acc + (size_t(j) * p.heads_kv + g) * dim;
    for (int d = 0; d < dim; ++d) {
      dk_out[d] += double(p.softmax_scale) * dk[d];
      dv_out[d] += v_scale * dv[d];
    }
  }
}

// The per-document dS and P̂ matrices of one head.
struct HeadMatrices {
  std::vector<std::vector<float>> ds;
  std::vector<std::vector<uint8_t>> p_hat;
};

HeadMatrices head_matrices(const Context& c, int h) {
  const Problem& p = c.p;
  HeadMatrices m;
  for (int b = 0; b < p.batch(); ++b) {
    m.ds.emplace_back(size_t(c.q_len(b)) * c.k_len(b), 0.0f);
    m.p_hat.emplace_back(size_t(c.q_len(b)) * c.k_len(b), uint8_t(0));
  }
  const std::vector<RowChunk> chunks = row_chunks(p.cu_seqlens_q, {h}, kRowsPerTask);
  parallel_for(int(chunks.size()), [&](int item) {
    const RowChunk& r = chunks[item];
    score_gradient_rows(c, h, r.doc, r.begin, r.end, m.ds[r.doc].data(), m.p_hat[r.doc].data());
  });
  return m;
}

}  // namespace

BackwardResult backward(const Problem& p, const Inputs& in, const HostTensor& o,
                        const std::vector<float>& stats, BackwardPrecision precision,
                        const QuantizationHooks& hooks) {
  const Context c(p, in, o, stats, precision, hooks);
  const int dim = p.head_dim;
  BackwardResult r;
  r.dq.assign(size_t(p.total_q()) * p.heads_q * dim, 0.0f);
  std::vector<double> dk_acc(size_t(p.total_k()) * p.heads_kv * dim, 0.0);
  std::vector<double> dv_acc(dk_acc.size(), 0.0);

  // Heads one after another: dK and dV of a KV head add its query heads in head order.
  for (int h = 0; h < p.heads_q; ++h) {
    const HeadMatrices m = head_matrices(c, h);
    const std::vector<RowChunk> q_chunks = row_chunks(p.cu_seqlens_q, {h}, kRowsPerTask);
    const std::vector<RowChunk> k_chunks = row_chunks(p.cu_seqlens_k, {h}, kRowsPerTask);
    const int dq_items = int(q_chunks.size());
    parallel_for(dq_items + int(k_chunks.size()), [&](int item) {
      if (item < dq_items) {
        const RowChunk& q = q_chunks[item];
        dq_rows(c, h, q.doc, q.begin, q.end, m.ds[q.doc].data(), r.dq.data());
      } else {
        const RowChunk& k = k_chunks[item - dq_items];
        dk_dv_rows(c, h, k.doc, k.begin, k.end, m.ds[k.doc].data(), m.p_hat[k.doc].data(),
                   dk_acc.data(), dv_acc.data());
      }
    });
  }
  r.dk.assign(dk_acc.begin(), dk_acc.end());
  r.dv.assign(dv_acc.begin(), dv_acc.end());
  // §7: what the poison writes, K̂c's and dÔ'''s flags included (the kernels' backward K job
  // takes its amax from k - k_first, which overflows to Inf for keys ~1.7e38 apart; the dO job
  // from dO * fl(1/l), which overflows where l is tiny). With an empty side the gradients are
  // zeros, defined without the values: no Inf is looked for, as in the forward.
  const bool empty_side = p.total_q() == 0 || p.total_k() == 0;
  if (!empty_side && (c.fwd.infinite_input() || c.bwd.k_centered.infinite || c.bwd.d_o.infinite ||
                      c.bwd.d_o_scaled.infinite)) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (auto* values : {&r.dq, &r.dk, &r.dv}) std::fill(values->begin(), values->end(), nan);
  }
  return r;
}

std::vector<float> score_gradient(const Problem& p, const Inputs& in, const HostTensor& o,
                                  const std::vector<float>& stats, BackwardPrecision precision,
                                  int head, int doc) {
  const Context c(p, in, o, stats, precision, {});
  std::vector<float> ds(size_t(c.q_len(doc)) * c.k_len(doc), 0.0f);
  std::vector<uint8_t> p_hat(ds.size(), 0);
  score_gradient_rows(c, head, doc, p.cu_seqlens_q[doc], p.cu_seqlens_q[doc + 1], ds.data(),
                      p_hat.data());
  return ds;
}

}  // namespace internal

BackwardResult backward(const Problem& problem, const Inputs& inputs, const HostTensor& o,
                        const std::vector<float>& softmax_stats, BackwardPrecision precision) {
  return internal::backward(problem, inputs, o, softmax_stats, precision, {});
}

}  // namespace flamia::ref
