// The quantized operands of the forward and the backward (numerics §3), built with
// quantize_ref: the bit-exact spec of the GPU quantize pass.
#include <cmath>

#include "reference/attention_internal.h"
#include "reference/attention_ref.h"

namespace flamia::ref {

namespace {

// First packed key token of each token's document (-1 for documents without keys never
// occurs: a token belongs to a non-empty document).
std::vector<int> document_first_token(const std::vector<int32_t>& cu_seqlens) {
  std::vector<int> first(size_t(cu_seqlens.back()), 0);
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b)
    for (int t = cu_seqlens[b]; t < cu_seqlens[b + 1]; ++t) first[t] = cu_seqlens[b];
  return first;
}

}  // namespace

namespace internal {

ForwardOperandsRef quantize_forward_operands(const Problem& p, const Inputs& in,
                                             const QuantizationHooks& hooks) {
  validate(p);
  const int dim = p.head_dim;
  const std::vector<TokenBlock> q_blocks = hooks.operand_blocks(p.cu_seqlens_q, p.scale_mode);
  const std::vector<TokenBlock> k_blocks = hooks.operand_blocks(p.cu_seqlens_k, p.scale_mode);
  const std::vector<int> first_key = document_first_token(p.cu_seqlens_k);

  // The key-smoothing vector m of a key token (numerics §4.1).
  auto smoothing = [&](int token, int g, int d) -> float {
    switch (p.key_smoothing) {
      case KeySmoothing::kFirstKey:
        return in.k.at(first_key[token], g, d);
      case KeySmoothing::kVector:
        return p.smoothing_vector[size_t(g) * dim + d];
      case KeySmoothing::kNone:
        break;
    }
    return 0.0f;
  };

  ForwardOperandsRef ops;
  ops.q = quantize([&](int t, int h, int d) { return in.q.at(t, h, d); }, p.total_q(), p.heads_q,
                   dim, q_blocks, hooks.scale_rule);
  const ElementSource k_source = [&](int t, int g, int d) {
    return in.k.at(t, g, d) - smoothing(t, g, d);
  };
  const ElementSource v_source = [&](int t, int g, int d) { return in.v.at(t, g, d); };
  if (p.scale_mode == ScaleMode::kStatic) {
    ops.k = quantize_static(k_source, p.total_k(), p.heads_kv, dim, p.static_key_exponents);
    ops.v = quantize_static(v_source, p.total_k(), p.heads_kv, dim, p.static_value_exponents);
  } else {
    ops.k = quantize(k_source, p.total_k(), p.heads_kv, dim, k_blocks, hooks.scale_rule);
    ops.v = quantize(v_source, p.total_k(), p.heads_kv, dim, k_blocks, hooks.scale_rule);
  }
  ops.v_t = token_major(ops.v, /*permuted=*/true);
  if (p.score_format == ScoreFormat::kNvfp4) {  // numerics §9: the E4M3 rule's exponents, e - 2
    ops.q_scores = quantize_nvfp4([&](int t, int h, int d) { return in.q.at(t, h, d); }, ops.q);
    ops.k_scores = quantize_nvfp4(k_source, ops.k);
  }

  if (p.key_smoothing != KeySmoothing::kNone) {
    // LSE shift softmax_scale * (q_i . m): BF16 q, the dot rounded once to FP32.
    ops.lse_shift.assign(size_t(p.heads_q) * p.total_q(), 0.0f);
    for (int b = 0; b < p.batch(); ++b) {
      if (p.cu_seqlens_k[b] == p.cu_seqlens_k[b + 1]) continue;  // no keys: rows fully masked
      const int key_token = p.cu_seqlens_k[b];
      for (int i = p.cu_seqlens_q[b]; i < p.cu_seqlens_q[b + 1]; ++i)
        for (int h = 0; h < p.heads_q; ++h) {
          double dot = 0.0;
          for (int d = 0; d < dim; ++d)
            dot += double(in.q.at(i, h, d)) * double(smoothing(key_token, p.kv_head(h), d));
          ops.lse_shift[size_t(h) * p.total_q() + i] = p.softmax_scale * float(dot);
        }
    }
  }
  return ops;
}

BackwardOperandsRef quantize_backward_operands(const Problem& p, const Inputs& in,
                                               const ForwardOperandsRef& fwd, const HostTensor& o,
                                               const std::vector<float>& stats,
                                               const QuantizationHooks& hooks) {
  validate(p);
  const int dim = p.head_dim;
  const int total_q = p.total_q();
  const std::vector<TokenBlock> q_blocks = hooks.operand_blocks(p.cu_seqlens_q, p.scale_mode);
  const std::vector<TokenBlock> k_blocks = hooks.operand_blocks(p.cu_seqlens_k, p.scale_mode);
  const std::vector<int> first_key = document_first_token(p.cu_seqlens_k);

  BackwardOperandsRef ops;
  ops.q_t = token_major(fwd.q, /*permuted=*/true);
  ops.k_centered = quantize(
      [&](int t, int g, int d) {
        const float k = in.k.at(t, g, d);
        return hooks.center_keys_for_dq ? k - in.k.at(first_key[t], g, d) : k;
      },
      p.total_k(), p.heads_kv, dim, k_blocks, hooks.scale_rule);
  ops.k_centered_t = token_major(ops.k_centered, /*permuted=*/false);
  ops.d_o = quantize([&](int t, int h, int d) { return in.d_o.at(t, h, d); }, total_q, p.heads_q,
                     dim, q_blocks, hooks.scale_rule);

  // dO'' = dO * r with r = 1/l rounded once (inverse_l_factor); 0 where r = 0: a fully masked
  // row (l = 0) contributes nothing.
  auto inverse_l_of = [&](int t, int h) {
    return inverse_l_factor(stats[(size_t(h) * total_q + t) * 2 + 1]);
  };
  ops.d_o_scaled = quantize(
      [&](int t, int h, int d) {
        const float r = inverse_l_of(t, h);
        return r == 0.0f ? 0.0f : in.d_o.at(t, h, d) * r;
      },
      total_q, p.heads_q, dim, tile_aligned_blocks(p.cu_seqlens_q, kDoScaledBlockTokens),
      hooks.scale_rule);
  ops.d_o_scaled_t = token_major(ops.d_o_scaled, /*permuted=*/true);

  // D_i = 2^edo_i * (dÔ_i . O_i): from the quantized dO so that it matches dP (§5 step 3).
  ops.delta.assign(size_t(p.heads_q) * total_q, 0.0f);
  for (int t = 0; t < total_q; ++t)
    for (int h = 0; h < p.heads_q; ++h) {
      double dot = 0.0;
      for (int d = 0; d < dim; ++d)
        dot += double(e4m3_decode(ops.d_o.value(t, h, d))) * double(o.at(t, h, d));
      ops.delta[size_t(h) * total_q + t] = float(dot) * exp2_int(ops.d_o.exponent(t, h));
    }
  // fp8-bf16grad: D from the BF16 dO that its dP uses (§5 step 10).
  ops.delta_bf16.assign(size_t(p.heads_q) * total_q, 0.0f);
  for (int t = 0; t < total_q; ++t)
    for (int h = 0; h < p.heads_q; ++h) {
      double dot = 0.0;
      for (int d = 0; d < dim; ++d) dot += double(in.d_o.at(t, h, d)) * double(o.at(t, h, d));
      ops.delta_bf16[size_t(h) * total_q + t] = float(dot);
    }
  return ops;
}

}  // namespace internal

ForwardOperandsRef quantize_forward_operands(const Problem& problem, const Inputs& inputs) {
  return internal::quantize_forward_operands(problem, inputs, {});
}

BackwardOperandsRef quantize_backward_operands(const Problem& problem, const Inputs& inputs,
                                               const ForwardOperandsRef& forward_operands,
                                               const HostTensor& o,
                                               const std::vector<float>& softmax_stats) {
  return internal::quantize_backward_operands(problem, inputs, forward_operands, o, softmax_stats,
                                              {});
}

}  // namespace flamia::ref
