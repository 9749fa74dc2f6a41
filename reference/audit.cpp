#include "reference/audit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "reference/attention_internal.h"

namespace flamia::ref {

namespace {

// Perturbations of the tokens that must not matter: fresh draws, and scalings by 2^+-8 that
// move a token's magnitude far enough to change any scale it shares.
enum class Perturbation { kRedraw, kScaleUp, kScaleDown };
constexpr Perturbation kPerturbations[] = {Perturbation::kRedraw, Perturbation::kScaleUp,
                                           Perturbation::kScaleDown};
constexpr int kScaleShift = 8;
constexpr uint64_t kPerturbationStream = 0x7065727475726221ull;

// ---- the audit-only unsafe quantization ------------------------------------------------------
// OCP MX rule: e = floor(log2 amax) - 8. Values in (448, 512) * 2^e saturate to 448: the clamp
// through which a shared scale leaks.
int ocp_floor_exponent(float amax) {
  const uint32_t bits = float_bits(amax) & 0x7FFFFFFFu;
  const int biased = int(bits >> 23);
  if (bits == 0 || biased == 0xFF) return 0;
  if (biased == 0) return kMinScaleExponent;
  constexpr int kE4M3MaxExponent = 8;
  return std::clamp(biased - 127 - kE4M3MaxExponent, kMinScaleExponent, kMaxScaleExponent);
}

// 32-token blocks of the packed tensor, ignoring document boundaries.
std::vector<TokenBlock> global_blocks(const std::vector<int32_t>& cu_seqlens, ScaleMode) {
  std::vector<TokenBlock> blocks;
  const int total = cu_seqlens.back();
  for (int t = 0; t < total; t += kBlock32Tokens)
    blocks.push_back({t, std::min(t + kBlock32Tokens, total)});
  return blocks;
}

internal::QuantizationHooks unsafe_hooks() {
  internal::QuantizationHooks hooks;
  hooks.operand_blocks = global_blocks;
  hooks.scale_rule = ocp_floor_exponent;
  return hooks;
}

// ---- perturbing and comparing --------------------------------------------------------------
void perturb_rows(HostTensor& x, int begin, int end, Perturbation kind, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float factor =
      kind == Perturbation::kScaleUp ? exp2_int(kScaleShift) : exp2_int(-kScaleShift);
  for (int t = begin; t < end; ++t)
    for (int h = 0; h < x.heads; ++h)
      for (int d = 0; d < x.dim; ++d)
        x.set(t, h, d, kind == Perturbation::kRedraw ? normal(rng) : x.at(t, h, d) * factor);
}

// Every token outside [begin, end) of a tensor.
void perturb_outside(HostTensor& x, int begin, int end, Perturbation kind, std::mt19937_64& rng) {
  perturb_rows(x, 0, begin, kind, rng);
  perturb_rows(x, end, x.tokens, kind, rng);
}

// Compares rows [begin, end) of two (tokens, heads, dim) FP32 tensors bit for bit.
void compare_rows(const std::vector<float>& base, const std::vector<float>& other, int heads,
                  int dim, int begin, int end, bool cross_document, AuditResult& result) {
  const size_t from = size_t(begin) * heads * dim, to = size_t(end) * heads * dim;
  if (other.size() < to || base.size() < to)
    throw std::runtime_error("flamia audit: an output has the wrong size");
  for (size_t x = from; x < to; ++x) {
    ++result.compared;
    if (float_bits(base[x]) == float_bits(other[x])) continue;
    ++result.changed;
    if (cross_document) ++result.cross_document_changed;
    const double diff = std::fabs(double(base[x]) - double(other[x]));
    result.max_abs = std::max(result.max_abs, std::isnan(diff) ? INFINITY : diff);
  }
}

std::vector<int> audited_positions(const AuditWorkload& w, int length) {
  std::vector<int> positions;
  for (int i : w.positions)
    if (i >= 0 && i < length) positions.push_back(i);
  positions.push_back(length - 1);
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  return positions;
}

std::mt19937_64 perturbation_rng(uint64_t seed, int doc, int position, Perturbation kind) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32),   uint32_t(kPerturbationStream),
                    uint32_t(doc),  uint32_t(position + 1), uint32_t(kind)};
  return std::mt19937_64(seq);
}

ScaleMode scale_mode_of(AuditMode mode) {
  return mode == AuditMode::kExact ? ScaleMode::kExact : ScaleMode::kBlock32;
}

}  // namespace

const char* audit_mode_name(AuditMode mode) {
  switch (mode) {
    case AuditMode::kExact:
      return "exact";
    case AuditMode::kBlock32:
      return "block32";
    case AuditMode::kUnsafe:
      return "unsafe";
  }
  return "?";
}

AuditForward reference_audit_forward() {
  return [](const Problem& p, const Inputs& in) { return forward(p, in).o; };
}

AuditResult audit_forward(AuditMode mode, const AuditWorkload& w, const AuditForward& forward) {
  AuditForward run = forward;
  if (mode == AuditMode::kUnsafe) {
    if (forward) throw std::invalid_argument("flamia audit: unsafe mode runs the CPU reference");
    run = [](const Problem& p, const Inputs& in) {
      return internal::forward(p, in, unsafe_hooks()).o;
    };
  }
  if (!run) run = reference_audit_forward();

  Problem p =
      make_problem(w.doc_lengths, w.heads_q, w.heads_kv, w.head_dim, true, scale_mode_of(mode));
  p.key_smoothing = w.key_smoothing;
  p.score_format = w.score_format;
  const Inputs base_inputs = make_inputs(p, {w.seed});
  const std::vector<float> base = run(p, base_inputs);
  AuditResult result;

  for (int b = 0; b < p.batch(); ++b) {
    const int begin = p.cu_seqlens_q[b], end = p.cu_seqlens_q[b + 1];
    if (begin == end) continue;
    for (Perturbation kind : kPerturbations) {
      // Later tokens of this document: outputs at positions <= i must not move.
      for (int i : audited_positions(w, end - begin)) {
        if (begin + i + 1 >= end) continue;  // nothing later (the last position: next loop)
        Inputs in = base_inputs;
        std::mt19937_64 rng = perturbation_rng(w.seed, b, i, kind);
        perturb_rows(in.q, begin + i + 1, end, kind, rng);
        perturb_rows(in.k, begin + i + 1, end, kind, rng);
        perturb_rows(in.v, begin + i + 1, end, kind, rng);
        compare_rows(base, run(p, in), p.heads_q, p.head_dim, begin, begin + i + 1, false, result);
        ++result.runs;
      }
      // Every other document: no output of this document may move.
      Inputs in = base_inputs;
      std::mt19937_64 rng = perturbation_rng(w.seed, b, -2, kind);
      perturb_outside(in.q, begin, end, kind, rng);
      perturb_outside(in.k, begin, end, kind, rng);
      perturb_outside(in.v, begin, end, kind, rng);
      compare_rows(base, run(p, in), p.heads_q, p.head_dim, begin, end, true, result);
      ++result.runs;
    }
  }
  return result;
}

AuditSummary audit_all(const AuditWorkload& workload) {
  return {audit_forward(AuditMode::kExact, workload), audit_forward(AuditMode::kBlock32, workload),
          audit_forward(AuditMode::kUnsafe, workload)};
}

std::string audit_json(const AuditSummary& s) {
  auto entry = [](const char* name, const AuditResult& r) {
    char buffer[160];
    // A non-finite max_abs (a NaN appeared) prints as 1e999, which JSON parsers read as inf.
    if (std::isfinite(r.max_abs))
      std::snprintf(buffer, sizeof(buffer), "\"%s\": {\"changed\": %lld, \"max_abs\": %.9g}", name,
                    static_cast<long long>(r.changed), r.max_abs);
    else
      std::snprintf(buffer, sizeof(buffer), "\"%s\": {\"changed\": %lld, \"max_abs\": 1e999}", name,
                    static_cast<long long>(r.changed));
    return std::string(buffer);
  };
  return "{" + entry("exact", s.exact) + ", " + entry("block32", s.block32) + ", " +
         entry("unsafe", s.unsafe) + "}";
}

AuditBackward reference_audit_backward(BackwardPrecision precision) {
  return [precision](const Problem& p, const Inputs& in) {
    const ForwardResult f = forward(p, in);
    BackwardResult g = backward(p, in, f.o_bf16, f.softmax_stats, precision);
    return AuditGradients{std::move(g.dq), std::move(g.dk), std::move(g.dv)};
  };
}

AuditResult audit_backward_cross_document(ScaleMode mode, const AuditWorkload& w,
                                          const AuditBackward& backward) {
  const AuditBackward run = backward ? backward : reference_audit_backward();
  Problem p = make_problem(w.doc_lengths, w.heads_q, w.heads_kv, w.head_dim, true, mode);
  p.key_smoothing = w.key_smoothing;
  p.score_format = w.score_format;
  const Inputs base_inputs = make_inputs(p, {w.seed});
  const AuditGradients base = run(p, base_inputs);
  AuditResult result;
  for (int b = 0; b < p.batch(); ++b) {
    const int q_begin = p.cu_seqlens_q[b], q_end = p.cu_seqlens_q[b + 1];
    const int k_begin = p.cu_seqlens_k[b], k_end = p.cu_seqlens_k[b + 1];
    if (q_begin == q_end) continue;
    for (Perturbation kind : kPerturbations) {
      Inputs in = base_inputs;
      std::mt19937_64 rng = perturbation_rng(w.seed, b, -3, kind);
      perturb_outside(in.q, q_begin, q_end, kind, rng);
      perturb_outside(in.d_o, q_begin, q_end, kind, rng);
      perturb_outside(in.k, k_begin, k_end, kind, rng);
      perturb_outside(in.v, k_begin, k_end, kind, rng);
      const AuditGradients out = run(p, in);
      compare_rows(base.dq, out.dq, p.heads_q, p.head_dim, q_begin, q_end, true, result);
      compare_rows(base.dk, out.dk, p.heads_kv, p.head_dim, k_begin, k_end, true, result);
      compare_rows(base.dv, out.dv, p.heads_kv, p.head_dim, k_begin, k_end, true, result);
      ++result.runs;
    }
  }
  return result;
}

}  // namespace flamia::ref
