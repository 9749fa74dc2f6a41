// Causality audit: does any output at position <= i of a document change when later tokens of
// that document, or any token of another document, change? The forward is a parameter, so the
// same audit runs on the CPU reference and on the GPU kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/attention_ref.h"

namespace flamia::ref {

// `exact` and `block32` are flamia's scale modes. `unsafe` exists only here: the OCP scale rule
// (e = floor(log2 amax) - 8, which clamps) over global 32-token blocks that run across document
// boundaries. It must leak: it proves the audit can fail.
enum class AuditMode { kExact, kBlock32, kUnsafe };
const char* audit_mode_name(AuditMode mode);

struct AuditWorkload {
  std::vector<int> doc_lengths = {1, 40, 77, 130};
  int heads_q = 4;
  int heads_kv = 2;
  int head_dim = 64;
  uint64_t seed = 20240611;
  // Audited positions inside each document (document-relative); each document's last position
  // is always added. Positions past a document's end are skipped.
  std::vector<int> positions = {0, 1, 31, 32, 33};
  KeySmoothing key_smoothing = KeySmoothing::kNone;  // kVector is not audited (needs a vector)
  ScoreFormat score_format = ScoreFormat::kFp8;      // kNvfp4: the CPU reference only
};

struct AuditResult {
  int64_t changed = 0;   // output elements that differ from the unperturbed run, over all runs
  double max_abs = 0.0;  // the largest absolute difference (inf when a NaN appears)
  int64_t cross_document_changed = 0;  // part of `changed` from runs that only touched other docs
  int64_t compared = 0;                // output elements compared, over all runs
  int runs = 0;                        // perturbed forward (or backward) runs
};

// A forward under audit: O as FP32 [total_q][heads_q][head_dim] (BF16 outputs converted).
using AuditForward = std::function<std::vector<float>(const Problem&, const Inputs&)>;
// The CPU reference forward (its FP32 O).
AuditForward reference_audit_forward();

// Audits `forward` (the CPU reference when empty) on a causal workload in one mode: the problem
// handed to `forward` carries the mode's ScaleMode. kUnsafe needs the CPU reference (an
// explicit forward throws std::invalid_argument).
AuditResult audit_forward(AuditMode mode, const AuditWorkload& workload = {},
                          const AuditForward& forward = {});

struct AuditSummary {
  AuditResult exact, block32, unsafe;
};
AuditSummary audit_all(const AuditWorkload& workload = {});
// {"exact": {"changed": N, "max_abs": x}, "block32": {...}, "unsafe": {...}}
std::string audit_json(const AuditSummary& summary);

// Backward: dQ, dK, dV (FP32; BF16 outputs converted) from the inputs, forward included.
struct AuditGradients {
  std::vector<float> dq, dk, dv;
};
using AuditBackward = std::function<AuditGradients(const Problem&, const Inputs&)>;
// The CPU reference forward + backward of `precision`.
AuditBackward reference_audit_backward(BackwardPrecision precision = BackwardPrecision::kFp8);

// Perturbs every other document (q, k, v, dO) and checks this document's dQ, dK and dV
// (`backward` = the CPU reference when empty). Document-local scales make both modes exact.
AuditResult audit_backward_cross_document(ScaleMode mode = ScaleMode::kExact,
                                          const AuditWorkload& workload = {},
                                          const AuditBackward& backward = {});

}  // namespace flamia::ref
