// Internals of the CPU reference that tests and the causality audit reach into but that are not
// options of flamia: quantization hooks (the audit's deliberately unsafe mode, the uncentered
// K̂c ablation) and the thread helper.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "reference/attention_ref.h"

namespace flamia::ref::internal {

// How the operand tensors (Q, K, V, dO, K̂c) are cut into scale blocks.
using BlockRule =
    std::function<std::vector<TokenBlock>(const std::vector<int32_t>& cu_seqlens, ScaleMode)>;

struct QuantizationHooks {
  BlockRule operand_blocks = scale_blocks;  // numerics §2
  ScaleRule scale_rule = scale_exponent;    // every quantization, dS included
  // Backward: K̂c from k - k_first(doc) (the contract) or, for the ablation, from k itself.
  bool center_keys_for_dq = true;
  // fp8-bf16grad ablations, the contract before 2026-11-29 (§5.10 keeps both false): D_i from
  // the quantized dÔ (inconsistent with this precision's BF16 dP), and dQ through the raw BF16
  // keys instead of the BF16 copy of k - k_first(doc).
  bool bf16grad_delta_from_fp8_d_o = false;
  bool bf16grad_uncentered_keys = false;
};

ForwardOperandsRef quantize_forward_operands(const Problem& problem, const Inputs& inputs,
                                             const QuantizationHooks& hooks);
ForwardResult forward(const Problem& problem, const Inputs& inputs, const QuantizationHooks& hooks);
BackwardOperandsRef quantize_backward_operands(const Problem& problem, const Inputs& inputs,
                                               const ForwardOperandsRef& forward_operands,
                                               const HostTensor& o,
                                               const std::vector<float>& softmax_stats,
                                               const QuantizationHooks& hooks);
BackwardResult backward(const Problem& problem, const Inputs& inputs, const HostTensor& o,
                        const std::vector<float>& softmax_stats, BackwardPrecision precision,
                        const QuantizationHooks& hooks);

// The backward's dS (steps 1-5, BF16-rounded for fp8-bf16grad) of one head and document as a
// row-major [q_len][k_len] matrix; masked entries are 0. For tests of dS row sums.
std::vector<float> score_gradient(const Problem& problem, const Inputs& inputs, const HostTensor& o,
                                  const std::vector<float>& softmax_stats,
                                  BackwardPrecision precision, int head, int doc);

// The float64 reference on double inputs (row-major like the HostTensors), for finite
// differences.
struct Float64Inputs {
  std::vector<double> q, k, v, d_o;
};
Float64Inputs float64_inputs(const Inputs& inputs);
Float64Result float64_attention(const Problem& problem, const Float64Inputs& inputs,
                                bool with_backward);

// Runs body(0 .. count-1) on up to hardware_concurrency threads (FLAMIA_REF_THREADS overrides).
// Items must write disjoint outputs; results never depend on the thread count.
void parallel_for(int count, const std::function<void(int)>& body);

// Work items of one pass: a (head, document, row range) triple.
struct RowChunk {
  int head;
  int doc;
  int begin;  // packed row indices [begin, end)
  int end;
};
// Chunks of at most `rows` rows of every document (rows from cu_seqlens) for each listed head.
std::vector<RowChunk> row_chunks(const std::vector<int32_t>& cu_seqlens,
                                 const std::vector<int>& heads, int rows);

inline int max_document_length(const std::vector<int32_t>& cu_seqlens) {
  int longest = 0;
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b)
    longest = std::max(longest, int(cu_seqlens[b + 1] - cu_seqlens[b]));
  return longest;
}

// Operand values decoded to double (exact): [heads][tokens][dim], the layout the dot products
// want. Scales are not applied (NVFP4: e2m1 * s, without 2^e').
std::vector<double> decode_head_major(const Fp8Tensor& x);
std::vector<double> decode_head_major(const Nvfp4Tensor& x);

// Dot product with four partial sums. For two rows of E4M3 values (<= 256 of them) every
// partial sum is exact in double, so the result is exact and the order does not matter; for
// other rows it is merely deterministic.
inline double dot_product(const double* a, const double* b, int n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; ++d) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

// Number of keys row i sees in its document (causal: up to the diagonal).
inline int visible_keys(const Problem& p, int doc, int i) {
  const int kv_len = p.cu_seqlens_k[doc + 1] - p.cu_seqlens_k[doc];
  return p.causal ? i - p.cu_seqlens_q[doc] + 1 : kv_len;
}

// The first of them (document-local): 0, or the sliding window's first key.
inline int first_visible_key(const Problem& p, int doc, int i) {
  const int last = visible_keys(p, doc, i) - 1;
  return p.causal && p.sliding_window > 0 && last - p.sliding_window + 1 > 0
             ? last - p.sliding_window + 1
             : 0;
}

// Scores (or logits) of the keys [0, first) of a row computed over [0, n) set to -inf: the keys
// before the sliding window, which then weigh exactly 0 (P = 0, dS = 0).
template <typename T>
inline void mask_before_window(T* scores, int first) {
  for (int jj = 0; jj < first; ++jj) scores[jj] = -std::numeric_limits<T>::infinity();
}

// The forward's operands decoded for the score rows that the forward and the backward share.
struct ScoreOperands {
  ScoreOperands(const Problem& problem, const ForwardOperandsRef& operands);
  ScoreOperands(const ScoreOperands&) = delete;  // score_q may point into this object
  ScoreOperands& operator=(const ScoreOperands&) = delete;
  const Problem& p;
  const ForwardOperandsRef& ops;
  std::vector<double> q, v;  // decode_head_major of ops.q, ops.v (dK's Q̂, dV's and O's V̂)
  // Q·Kᵀ's operands, decoded, and their exponents: ops.q and ops.k (ScoreFormat::kFp8), or
  // ops.q_scores and ops.k_scores (kNvfp4). score_q points at q (FP8) or nvfp4_q.
  std::vector<double> nvfp4_q, score_k;
  const std::vector<double>* score_q;
  float c;  // softmax_scale * log2(e), FP32
  int score_q_exponent(int i, int h) const;
  int score_k_exponent(int j, int g) const;

  // t_ij of query row i (head h) for the keys [k_begin, k_begin + n) (numerics §4 step 2):
  // t = fma(S, (c * 2^eq_i) * 2^ek_j, ev_j) with S exact, rounded once to FP32 (ScaleMode::
  // kStatic: the factor is static_row_factor's); `s` receives S_ij in FP32 (static's step 4).
  void logits(int h, int i, int k_begin, int n, float* t, float* s) const;
  // The unquantized P̂ of key j (absolute index) of row (h, i) with the final M (steps 4 and 5;
  // backward step 2), in FP32: exp2((t - M) + 8), or under ScaleMode::kStatic
  // exp2(fma(S, f_i, ev - (M - 8))). A masked key (t = -inf) gives 0.
  float shifted_exp2(int h, int i, int j, float t, float s, float m) const;
};

}  // namespace flamia::ref::internal
