// `flamia audit [--json]`: the causality audit of the CPU reference.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/audit.h"
#include "cli.h"

namespace flamia::cli {

namespace {

void print_result(const char* name, const ref::AuditResult& r) {
  std::printf(
      "  %-8s changed %9lld  max_abs %-12.6g  (other documents: %lld changed; %d runs, %lld "
      "elements compared)\n",
      name, static_cast<long long>(r.changed), r.max_abs,
      static_cast<long long>(r.cross_document_changed), r.runs, static_cast<long long>(r.compared));
}

}  // namespace

int run_audit(const std::vector<std::string>& args) {
  bool json = false;
  for (const std::string& arg : args) {
    if (arg == "--json")
      json = true;
    else
      throw std::invalid_argument("unknown option " + arg);
  }
  const ref::AuditWorkload workload;
  const ref::AuditSummary summary = ref::audit_all(workload);
  if (json) {
    std::printf("%s\n", ref::audit_json(summary).c_str());
    return 0;
  }
  std::printf(
      "causality audit of the CPU reference: documents %s, causal, heads %d (KV %d), head dim %d\n",
      format_list(workload.doc_lengths).c_str(), workload.heads_q, workload.heads_kv,
      workload.head_dim);
  std::printf(
      "  positions 0, 1, 31, 32, 33 and the last of each document; later tokens and other\n"
      "  documents redrawn and scaled by 2^+-8; outputs at positions <= i compared bit for bit\n");
  print_result("exact", summary.exact);
  print_result("block32", summary.block32);
  print_result("unsafe", summary.unsafe);
  const ref::AuditResult backward = ref::audit_backward_cross_document(ScaleMode::kExact, workload);
  std::printf("  backward (exact): other documents changed %lld of %lld dQ/dK/dV elements\n",
              static_cast<long long>(backward.changed), static_cast<long long>(backward.compared));
  const bool ok = summary.exact.changed == 0 && summary.unsafe.changed > 0 &&
                  summary.block32.cross_document_changed == 0 && backward.changed == 0;
  std::printf("%s\n",
              ok ? "audit: PASS (exact is causal, unsafe leaks as it must)" : "audit: FAIL");
  return ok ? 0 : 1;
}

}  // namespace flamia::cli
