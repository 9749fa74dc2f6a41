// `flamia formats`: the CPU reference's error against float64 with Q·Kᵀ's operands in FP8 (flamia's
// kernels) and in NVFP4 (FLAMIA's mixed path, numerics §9), on the same inputs: what 4-bit
// scores would cost in accuracy under flamia's causal-safe scales. CPU only: Hopper has no FP4
// tensor core. A measurement, not a verdict (tests/cpu/test_nvfp4.cpp holds the bounds).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"
#include "reference/attention_ref.h"

namespace flamia::cli {

namespace {

struct FormatsOptions : WorkloadOptions {
  FormatsOptions() {
    docs = {1, 17, 113, 300, 700};
    heads_q = 4;
  }
  KeySmoothing smoothing = KeySmoothing::kNone;
  float key_bias = 0.0f;
};

float parse_key_bias(const std::string& text) {
  float bias = -1.0f;
  if (!read_whole(
          text, [](const std::string& t, size_t* used) { return std::stof(t, used); }, bias) ||
      !(bias >= 0.0f))
    throw std::invalid_argument("--key-bias takes a number >= 0");
  return bias;
}

FormatsOptions parse(const std::vector<std::string>& args) {
  FormatsOptions o;
  for (OptionReader r(args); r.next();) {
    if (read_workload_option(r, o)) continue;
    const std::string& a = r.option();
    if (a == "--smoothing")
      o.smoothing = parse_smoothing(r.value());
    else if (a == "--key-bias")
      o.key_bias = parse_key_bias(r.value());
    else
      throw std::invalid_argument("unknown option " + a);
  }
  for (int length : o.docs)
    if (length < 0) throw std::invalid_argument("--docs lengths must be >= 0");
  return o;
}

struct FormatErrors {
  double o, lse, dq, dk, dv;  // relative L2 against float64; lse: max abs over finite rows
};

double lse_error(const std::vector<float>& lse, const std::vector<double>& exact) {
  double worst = 0.0;
  for (size_t i = 0; i < lse.size(); ++i)
    if (std::isfinite(exact[i])) worst = std::max(worst, std::fabs(double(lse[i]) - exact[i]));
  return worst;
}

FormatErrors measure(ref::Problem p, ref::ScoreFormat format, const ref::Inputs& in,
                     const ref::Float64Result& exact, BackwardPrecision precision) {
  p.score_format = format;
  const ref::ForwardResult f = ref::forward(p, in);
  const ref::BackwardResult g = ref::backward(p, in, f.o_bf16, f.softmax_stats, precision);
  return {ref::rel_l2(f.o_bf16.to_float(), exact.o), lse_error(f.lse, exact.lse),
          ref::rel_l2(g.dq, exact.dq), ref::rel_l2(g.dk, exact.dk), ref::rel_l2(g.dv, exact.dv)};
}

}  // namespace

int run_formats(const std::vector<std::string>& args) {
  const FormatsOptions opt = parse(args);
  ref::Problem p = ref::make_problem(opt.docs, opt.heads_q, opt.heads_kv, opt.head_dim,
                                     /*causal=*/true, opt.scale_mode);
  p.key_smoothing = opt.smoothing;
  ref::validate(p);
  ref::InputOptions input_options;
  input_options.seed = opt.seed;
  input_options.key_bias = opt.key_bias;
  const ref::Inputs in = ref::make_inputs(p, input_options);
  const ref::Float64Result exact = ref::float64_attention(p, in, true);
  const ref::ScoreFormat formats[] = {ref::ScoreFormat::kFp8, ref::ScoreFormat::kNvfp4};
  FormatErrors errors[2];
  for (int f = 0; f < 2; ++f) errors[f] = measure(p, formats[f], in, exact, opt.precision);

  const char* smoothing = opt.smoothing == KeySmoothing::kNone ? "none" : "first_key";
  const char* precision = opt.precision == BackwardPrecision::kFp8 ? "fp8" : "fp8-bf16grad";
  if (opt.json) {
    std::printf(
        "{\"scale_mode\": \"%s\", \"smoothing\": \"%s\", \"key_bias\": %g, "
        "\"precision\": \"%s\"",
        ref::scale_mode_name(p.scale_mode), smoothing, opt.key_bias, precision);
    for (int f = 0; f < 2; ++f)
      std::printf(
          ", \"%s\": {\"o\": %.6g, \"lse\": %.6g, \"dq\": %.6g, \"dk\": %.6g, "
          "\"dv\": %.6g}",
          ref::score_format_name(formats[f]), errors[f].o, errors[f].lse, errors[f].dq,
          errors[f].dk, errors[f].dv);
    std::printf("}\n");
    return 0;
  }
  std::printf(
      "CPU reference against float64, Q·Kᵀ operands fp8 vs nvfp4 (numerics §9): documents %s, "
      "causal,\nheads %d (KV %d), head dim %d, scales %s, key smoothing %s, key bias %g, "
      "backward %s, seed %llu\n",
      format_list(opt.docs).c_str(), p.heads_q, p.heads_kv, p.head_dim,
      ref::scale_mode_name(p.scale_mode), smoothing, opt.key_bias, precision,
      static_cast<unsigned long long>(opt.seed));
  std::printf("  Q·Kᵀ      O rel L2   LSE max abs  dQ rel L2  dK rel L2  dV rel L2\n");
  for (int f = 0; f < 2; ++f)
    std::printf("  %-7s  %.3e  %.3e    %.3e  %.3e  %.3e\n", ref::score_format_name(formats[f]),
                errors[f].o, errors[f].lse, errors[f].dq, errors[f].dk, errors[f].dv);
  return 0;
}

}  // namespace flamia::cli
