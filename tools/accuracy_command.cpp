// `flamia accuracy`: one forward + backward of a packed workload on the GPU (through the C API,
// by gpu_runner's path), measured against the CPU reference of the contract and against float64.
// A measurement, not a verdict: the caller (bench/bench_attention.py) applies the tolerances of
// docs/numerics.md §7. Exit codes: 0 measured, 1 a failed GPU run or bad options, 2 no sm_90 GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli.h"
#include "gpu_runner.h"
#include "reference/attention_ref.h"

namespace flamia::cli {

namespace {

constexpr int kExitMeasured = 0;
constexpr int kExitGpuFailed = 1;
constexpr int kExitNoGpu = 2;

struct AccuracyOptions : WorkloadOptions {
  bool causal = true;
};

AccuracyOptions parse(const std::vector<std::string>& args) {
  AccuracyOptions o;
  for (OptionReader r(args); r.next();) {
    if (read_workload_option(r, o)) continue;
    if (r.option() == "--full")
      o.causal = false;
    else
      throw std::invalid_argument("unknown option " + r.option());
  }
  if (o.docs.empty()) throw std::invalid_argument("--docs is required (e.g. --docs 3549,4377,725)");
  return o;
}

bool any_non_finite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return true;
  return false;
}

// LSE may be -inf (a row without visible keys, numerics §4 step 9); NaN and +inf are errors.
bool lse_invalid(const std::vector<float>& lse) {
  for (float v : lse)
    if (std::isnan(v) || v == INFINITY) return true;
  return false;
}

// One JSON member; a non-finite value prints as 1e999, which JSON parsers read as inf (the
// convention of ref::audit_json).
std::string json_number(const char* name, double value) {
  char buffer[96];
  if (std::isfinite(value))
    std::snprintf(buffer, sizeof(buffer), "\"%s\": %.9g", name, value);
  else
    std::snprintf(buffer, sizeof(buffer), "\"%s\": 1e999", name);
  return buffer;
}

struct Measurement {
  double o_ref, dq_ref, dk_ref, dv_ref;                  // GPU vs the contract's reference
  double o_f64, dq_f64, dk_f64, dv_f64;                  // GPU vs float64
  double ref_o_f64, ref_dq_f64, ref_dk_f64, ref_dv_f64;  // the reference vs float64
  double lse_ref;                                        // max |LSE_gpu - LSE_ref|
  bool nan_or_inf;
  double seconds_reference;
};

std::string to_json(const Measurement& m) {
  std::string out = "{";
  const std::pair<const char*, double> members[] = {
      {"o_rel_l2_vs_ref", m.o_ref},           {"dq_rel_l2_vs_ref", m.dq_ref},
      {"dk_rel_l2_vs_ref", m.dk_ref},         {"dv_rel_l2_vs_ref", m.dv_ref},
      {"o_rel_l2_vs_f64", m.o_f64},           {"dq_rel_l2_vs_f64", m.dq_f64},
      {"dk_rel_l2_vs_f64", m.dk_f64},         {"dv_rel_l2_vs_f64", m.dv_f64},
      {"ref_o_rel_l2_vs_f64", m.ref_o_f64},   {"ref_dq_rel_l2_vs_f64", m.ref_dq_f64},
      {"ref_dk_rel_l2_vs_f64", m.ref_dk_f64}, {"ref_dv_rel_l2_vs_f64", m.ref_dv_f64},
      {"lse_max_abs_vs_ref", m.lse_ref}};
  for (const auto& [name, value] : members) out += json_number(name, value) + ", ";
  out += std::string("\"nan_or_inf\": ") + (m.nan_or_inf ? "true" : "false") + ", ";
  return out + json_number("seconds_reference", m.seconds_reference) + "}";
}

void print_text(const Measurement& m) {
  std::printf("relative L2 error       O          dQ         dK         dV\n");
  std::printf("  GPU vs reference   %.3e  %.3e  %.3e  %.3e\n", m.o_ref, m.dq_ref, m.dk_ref,
              m.dv_ref);
  std::printf("  GPU vs float64     %.3e  %.3e  %.3e  %.3e\n", m.o_f64, m.dq_f64, m.dk_f64,
              m.dv_f64);
  std::printf("  ref vs float64     %.3e  %.3e  %.3e  %.3e\n", m.ref_o_f64, m.ref_dq_f64,
              m.ref_dk_f64, m.ref_dv_f64);
  std::printf("LSE max abs vs reference %.3e; NaN or Inf in the GPU outputs: %s\n", m.lse_ref,
              m.nan_or_inf ? "YES" : "no");
  std::printf("CPU reference (contract + float64): %.2f s on %u hardware threads\n",
              m.seconds_reference, std::thread::hardware_concurrency());
}

}  // namespace

int run_accuracy(const std::vector<std::string>& args) {
  const AccuracyOptions opt = parse(args);
  for (int length : opt.docs)
    if (length < 0) throw std::invalid_argument("--docs lengths must be >= 0");
  const ref::Problem p = ref::make_problem(opt.docs, opt.heads_q, opt.heads_kv, opt.head_dim,
                                           opt.causal, opt.scale_mode);
  ref::validate(p);

  const GpuDevice gpu = probe_gpu();
  if (!gpu.usable) {
    std::fprintf(stderr,
                 "flamia accuracy: no sm_90 GPU (%s); this command measures the GPU kernels "
                 "and needs one\n",
                 gpu.description.c_str());
    return kExitNoGpu;
  }
  if (!opt.json)
    std::printf(
        "flamia accuracy on %s: documents %s (%d tokens), %s, heads %d (KV %d), head dim %d, "
        "scales %s, backward %s, seed %llu\n",
        gpu.description.c_str(), format_list(opt.docs).c_str(), p.total_q(),
        p.causal ? "causal" : "non-causal", p.heads_q, p.heads_kv, p.head_dim,
        ref::scale_mode_name(p.scale_mode),
        opt.precision == BackwardPrecision::kFp8 ? "fp8" : "fp8-bf16grad",
        static_cast<unsigned long long>(opt.seed));

  const ref::Inputs in = ref::make_inputs(p, {opt.seed});
  // First the GPU (fails fast), without timed repeats: this command measures accuracy only.
  const GpuRun run = run_gpu(p, in, true, opt.precision, 0);
  if (!run.ok) {
    std::fprintf(stderr, "flamia accuracy: GPU run failed: %s\n", run.error.c_str());
    return kExitGpuFailed;
  }

  // The reference's threads span (head, document, row chunk) items, up to
  // std::thread::hardware_concurrency() (FLAMIA_REF_THREADS overrides).
  const auto start = std::chrono::steady_clock::now();
  const ref::ForwardResult f = ref::forward(p, in);
  const ref::BackwardResult g = ref::backward(p, in, f.o_bf16, f.softmax_stats, opt.precision);
  const ref::Float64Result r = ref::float64_attention(p, in, true);
  const double seconds_reference = seconds_since(start);

  // The reference's O as the kernels write it (BF16), for both comparisons; the gradients
  // exist only in FP32 in the reference.
  const std::vector<float> ref_o = f.o_bf16.to_float();
  Measurement m;
  m.o_ref = ref::rel_l2(run.o, ref_o);
  m.dq_ref = ref::rel_l2(run.dq, g.dq);
  m.dk_ref = ref::rel_l2(run.dk, g.dk);
  m.dv_ref = ref::rel_l2(run.dv, g.dv);
  m.o_f64 = ref::rel_l2(run.o, r.o);
  m.dq_f64 = ref::rel_l2(run.dq, r.dq);
  m.dk_f64 = ref::rel_l2(run.dk, r.dk);
  m.dv_f64 = ref::rel_l2(run.dv, r.dv);
  m.ref_o_f64 = ref::rel_l2(ref_o, r.o);
  m.ref_dq_f64 = ref::rel_l2(g.dq, r.dq);
  m.ref_dk_f64 = ref::rel_l2(g.dk, r.dk);
  m.ref_dv_f64 = ref::rel_l2(g.dv, r.dv);
  m.lse_ref = lse_max_abs_difference(run.lse, f.lse);
  m.nan_or_inf = any_non_finite(run.o) || any_non_finite(run.dq) || any_non_finite(run.dk) ||
                 any_non_finite(run.dv) || lse_invalid(run.lse);
  m.seconds_reference = seconds_reference;

  if (opt.json)
    std::printf("%s\n", to_json(m).c_str());
  else {
    std::printf("  GPU path: %s\n", run.path.c_str());
    print_text(m);
  }
  return kExitMeasured;
}

}  // namespace flamia::cli
