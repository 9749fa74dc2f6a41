// The CPU reference of flamia's attention: the executable form of docs/numerics.md (§1-§6) for
// packed variable-length documents, forward and backward, plus an unquantized float64
// reference that measures every path's error. Exact S (double), FP32 scalar steps exactly as
// the contract writes them, double accumulation; work is spread over threads by (head,
// document, row chunk) and every result is independent of the thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/views.h"
#include "reference/bf16.h"
#include "reference/nvfp4_ref.h"
#include "reference/quantize_ref.h"

namespace flamia::ref {

// ---- Problem ----------------------------------------------------------------------------------
struct Problem {
  std::vector<int32_t> cu_seqlens_q;  // batch + 1 entries, starting at 0, non-decreasing
  std::vector<int32_t> cu_seqlens_k;
  int heads_q = 1;
  int heads_kv = 1;  // heads_q must be a multiple (GQA/MQA)
  int head_dim = 128;
  float softmax_scale = 1.0f;
  bool causal = true;      // causal documents must have equal query and key lengths
  int sliding_window = 0;  // causal only: 0 none, W: query i sees its document's keys [i-W+1, i]
  ScaleMode scale_mode = ScaleMode::kExact;
  KeySmoothing key_smoothing = KeySmoothing::kNone;
  std::vector<float> smoothing_vector;  // [heads_kv][head_dim] FP32, for KeySmoothing::kVector
  // ScaleMode::kStatic: K̂'s and V̂'s exponent per KV head (numerics §2), heads_kv each.
  std::vector<int8_t> static_key_exponents;
  std::vector<int8_t> static_value_exponents;
  // The operands of Q·Kᵀ (numerics §9): FP8 (flamia's kernels) or NVFP4 (FLAMIA's mixed path,
  // reference only: Hopper has no FP4 tensor core). The other products stay FP8 either way.
  ScoreFormat score_format = ScoreFormat::kFp8;

  int batch() const { return int(cu_seqlens_q.size()) - 1; }
  int total_q() const { return cu_seqlens_q.back(); }
  int total_k() const { return cu_seqlens_k.back(); }
  int group_size() const { return heads_q / heads_kv; }
  int kv_head(int h) const { return h / group_size(); }
};

// The static exponents make_problem gives every KV head under ScaleMode::kStatic: N(0, 1)
// inputs (make_inputs) stay far below 448 * 2^-5.
constexpr int8_t kDefaultStaticExponent = -5;

// "exact", "block32" or "static" (test names, messages).
inline const char* scale_mode_name(ScaleMode mode) {
  return mode == ScaleMode::kExact ? "exact" : mode == ScaleMode::kBlock32 ? "block32" : "static";
}

// Documents of the given lengths (queries = keys), softmax_scale = 1/sqrt(head_dim).
Problem make_problem(const std::vector<int>& doc_lengths, int heads_q, int heads_kv, int head_dim,
                     bool causal = true, ScaleMode scale_mode = ScaleMode::kExact);

// Throws std::invalid_argument for anything the contract does not define (bad cu_seqlens,
// heads not a multiple, causal documents with unequal lengths, a missing smoothing vector).
void validate(const Problem& problem);

// ---- Tensors ----------------------------------------------------------------------------------
// A dense (tokens, heads, dim) BF16 tensor stored as raw bits, dim contiguous.
struct HostTensor {
  int tokens = 0;
  int heads = 0;
  int dim = 0;
  std::vector<uint16_t> bits;

  HostTensor() = default;
  HostTensor(int tokens_, int heads_, int dim_)
      : tokens(tokens_), heads(heads_), dim(dim_), bits(size_t(tokens_) * heads_ * dim_, 0) {}
  size_t index(int t, int h, int d) const { return (size_t(t) * heads + h) * dim + d; }
  float at(int t, int h, int d) const { return bf16_to_float(bits[index(t, h, d)]); }
  void set(int t, int h, int d, float x) { bits[index(t, h, d)] = float_to_bf16(x); }
  std::vector<float> to_float() const;
};

// The BF16 inputs of one training step: q (total_q, Hq, D), k and v (total_k, Hkv, D), and the
// upstream gradient d_o (total_q, Hq, D).
struct Inputs {
  HostTensor q, k, v, d_o;
};

// Seeded random inputs, N(0, 1) unless an option says otherwise.
struct InputOptions {
  uint64_t seed = 0;
  // keys = N(0,1) + key_bias * b, b ~ N(0,1) per (KV head, channel), shared by every token: the
  // large common key component of trained models (what key smoothing and K̂c exist for).
  float key_bias = 0.0f;
  // The first token of every document becomes an attention sink: its key points along a
  // direction u that every query of the group also carries (logit ~ kSinkLogit above the rest),
  // and its value is small.
  bool sink_token = false;
  // Every kSmallValuePeriod-th token (t % period == kSmallValuePhase) has its values scaled by
  // 2^-small_value_binades, like a sink's: value exponents far apart inside one key tile (the
  // forward's FP32 row-sum fallback) without starving the other keys' P̂ of range.
  int small_value_binades = 0;
};
Inputs make_inputs(const Problem& problem, const InputOptions& options = {});

// ---- Quantized operands (the bit-exact spec of the quantize pass, numerics §3) ---------------
struct ForwardOperandsRef {
  Fp8Tensor q;                   // Q̂, scale_mode blocks
  Fp8Tensor k;                   // K̂ from k - m (key smoothing)
  Fp8Tensor v;                   // V̂ (row-major; its exponents are ev)
  std::vector<uint8_t> v_t;      // V̂ᵀ [Hkv][D][pad16(total_k)], permuted tokens
  std::vector<float> lse_shift;  // [Hq][total_q] softmax_scale * (q . m); empty without smoothing
  // ScoreFormat::kNvfp4: Q·Kᵀ's operands Q̃ (from q) and K̃ (from k - m, as K̂); empty otherwise.
  Nvfp4Tensor q_scores, k_scores;
  bool infinite_input() const {  // numerics §7 and §9: the inputs that make every output NaN
    return q.infinite || k.infinite || v.infinite || q_scores.non_finite || k_scores.non_finite;
  }
};
ForwardOperandsRef quantize_forward_operands(const Problem& problem, const Inputs& inputs);

struct BackwardOperandsRef {
  std::vector<uint8_t> q_t;           // Q̂ᵀ [Hq][D][pad16(total_q)], permuted tokens
  Fp8Tensor k_centered;               // K̂c from k - k_first(doc), scale_mode blocks
  std::vector<uint8_t> k_centered_t;  // K̂cᵀ [Hkv][D][pad16(total_k)], natural order
  Fp8Tensor d_o;                      // dÔ, scale_mode blocks
  Fp8Tensor d_o_scaled;               // dÔ'' from dO / l, 64-query tile-aligned blocks
  std::vector<uint8_t> d_o_scaled_t;  // dÔ''ᵀ [Hq][D][pad16(total_q)], permuted tokens
  std::vector<float> delta;           // D_i = 2^edo_i * (dÔ_i . O_i), [Hq][total_q]
  std::vector<float> delta_bf16;      // D_i = dO_i . O_i from the BF16 dO (fp8-bf16grad)
};
// `o` is the forward's BF16 output, `softmax_stats` its {M, l}. A row with l = 0 (no visible
// key) gets dO'' = 0.
BackwardOperandsRef quantize_backward_operands(const Problem& problem, const Inputs& inputs,
                                               const ForwardOperandsRef& forward_operands,
                                               const HostTensor& o,
                                               const std::vector<float>& softmax_stats);

// ---- Forward and backward of the contract ------------------------------------------------------
// An Inf in an input (numerics §7) makes every output NaN: O, LSE and the stats (forward), dQ,
// dK and dV (backward).
struct ForwardResult {
  std::vector<float> o;              // [total_q][Hq][D] FP32, before the BF16 rounding
  HostTensor o_bf16;                 // the BF16 output the kernels write
  std::vector<float> lse;            // [Hq][total_q], natural log; -inf for fully masked rows
  std::vector<float> softmax_stats;  // [Hq][total_q][2] = {M, l}; {0, 0} for fully masked rows
};
ForwardResult forward(const Problem& problem, const Inputs& inputs);

struct BackwardResult {
  std::vector<float> dq;  // [total_q][Hq][D]
  std::vector<float> dk;  // [total_k][Hkv][D]
  std::vector<float> dv;  // [total_k][Hkv][D]
};
// Uses inputs.q, k, v, d_o; `o` and `softmax_stats` from the forward (LSE is not needed: the
// contract's backward reads {M, l}).
BackwardResult backward(const Problem& problem, const Inputs& inputs, const HostTensor& o,
                        const std::vector<float>& softmax_stats,
                        BackwardPrecision precision = BackwardPrecision::kFp8);

// ---- Unquantized float64 reference (plain softmax attention of the BF16 inputs) --------------
struct Float64Result {
  std::vector<double> o;           // [total_q][Hq][D]
  std::vector<double> lse;         // [Hq][total_q]
  std::vector<double> dq, dk, dv;  // empty unless with_backward
};
Float64Result float64_attention(const Problem& problem, const Inputs& inputs,
                                bool with_backward = true);

// ---- Error measures ---------------------------------------------------------------------------
// ||a - b|| / ||b|| (L2); 0 when both are zero, +inf when only b is; NaN anywhere gives NaN.
template <typename A, typename B>
double rel_l2(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return std::nan("");
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = double(a[i]), y = double(b[i]);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  if (std::isnan(diff) || std::isnan(norm)) return std::nan("");
  if (norm == 0.0) return diff == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(diff / norm);
}

}  // namespace flamia::ref
