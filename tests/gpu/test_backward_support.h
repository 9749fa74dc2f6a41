// Shared by the backward GPU tests: problem cases, the reference's operands uploaded to the
// device, and one launch_backward run with poisoned, strided outputs.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_utils.h"
#include "packed_shape.h"
#include "kernels/backward/backward.h"
#include "reference/attention_ref.h"

namespace flamia::test {

struct BackwardCase {
  std::string name;
  std::vector<int> q_docs;
  std::vector<int> k_docs;  // empty: the same lengths as q_docs
  int heads_q = 2;
  int heads_kv = 2;
  int head_dim = 128;
  bool causal = true;
  ScaleMode mode = ScaleMode::kExact;
  BackwardPrecision precision = BackwardPrecision::kFp8;
  KeySmoothing smoothing = KeySmoothing::kNone;
  float key_bias = 0.0f;
  bool sink = false;
  int sliding_window = 0;  // ref::Problem::sliding_window (causal only)
};

inline ref::Problem make_case_problem(const BackwardCase& c) {
  ref::Problem p = ref::make_problem(c.q_docs, c.heads_q, c.heads_kv, c.head_dim, c.causal, c.mode);
  if (!c.k_docs.empty()) {
    p.cu_seqlens_k.assign(1, 0);
    for (int length : c.k_docs) p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + length);
  }
  p.key_smoothing = c.smoothing;
  p.sliding_window = c.sliding_window;
  return p;
}

inline ref::Inputs make_case_inputs(const BackwardCase& c, const ref::Problem& p) {
  ref::InputOptions options;
  options.seed = case_seed(c.name);
  options.key_bias = c.key_bias;
  options.sink_token = c.sink;
  return ref::make_inputs(p, options);
}

// Everything the backward kernel reads, as the reference builds it (the bit-exact spec of the
// quantize pass), from the given forward output and stats.
struct HostOperands {
  ref::ForwardOperandsRef fwd;
  ref::BackwardOperandsRef bwd;
};

inline HostOperands make_host_operands(const ref::Problem& p, const ref::Inputs& in,
                                       const ref::HostTensor& o, const std::vector<float>& stats) {
  HostOperands ops;
  ops.fwd = ref::quantize_forward_operands(p, in);
  ops.bwd = ref::quantize_backward_operands(p, in, ops.fwd, o, stats);
  return ops;
}

// A BF16 output (tokens, heads, D) with padded strides (head pitch D + 8, so strides are not
// the dense ones), poisoned with NaN before every run.
class StridedOutput {
 public:
  static constexpr int kHeadPad = 8;
  StridedOutput(int tokens, int heads, int dim)
      : tokens_(tokens),
        heads_(heads),
        dim_(dim),
        buffer_(size_t(tokens) * heads * (dim + kHeadPad)) {}
  Bf16MutableView view() const {
    return {buffer_.get(), int64_t(heads_) * (dim_ + kHeadPad), int64_t(dim_ + kHeadPad)};
  }
  void poison() { buffer_.poison(); }
  // The written elements as raw bits, dense [tokens][heads][D].
  std::vector<uint16_t> bits() const {
    const std::vector<uint16_t> raw = buffer_.download();
    std::vector<uint16_t> out(size_t(tokens_) * heads_ * dim_);
    for (int t = 0; t < tokens_; ++t)
      for (int h = 0; h < heads_; ++h)
        for (int d = 0; d < dim_; ++d)
          out[(size_t(t) * heads_ + h) * dim_ + d] =
              raw[(size_t(t) * heads_ + h) * (dim_ + kHeadPad) + d];
    return out;
  }

 private:
  int tokens_, heads_, dim_;
  DeviceBuffer<uint16_t> buffer_;
};

inline std::vector<float> bits_to_float(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = ref::bf16_to_float(bits[i]);
  return out;
}

// BF16 k - k_first(doc), dense [total_k][heads_kv][head_dim]: fp8-bf16grad's dQ operand.
inline std::vector<uint16_t> centered_key_bits(const ref::Problem& p, const ref::Inputs& in) {
  std::vector<uint16_t> out(in.k.bits.size());
  for (int b = 0; b < p.batch(); ++b)
    for (int t = p.cu_seqlens_k[b]; t < p.cu_seqlens_k[b + 1]; ++t)
      for (int g = 0; g < p.heads_kv; ++g)
        for (int d = 0; d < p.head_dim; ++d)
          out[(size_t(t) * p.heads_kv + g) * p.head_dim + d] =
              ref::float_to_bf16(in.k.at(t, g, d) - in.k.at(p.cu_seqlens_k[b], g, d));
  return out;
}

inline std::vector<uint8_t> exponent_bytes(const std::vector<int8_t>& e) {
  return std::vector<uint8_t>(e.begin(), e.end());
}

struct BackwardRun {
  std::vector<uint16_t> dq, dk, dv;  // raw BF16 bits, dense
  std::vector<float> p_hat;          // debug output (when requested)
  cudaError_t launch = cudaSuccess;
  cudaError_t sync = cudaSuccess;
};

// The reference's operands on the device, and launch_backward on them.
class DeviceBackwardProblem {
 public:
  DeviceBackwardProblem(const ref::Problem& p, const ref::Inputs& in, const HostOperands& ops,
                        const std::vector<float>& stats)
      : p_(p),
        cu_q_(p.cu_seqlens_q),
        cu_k_(p.cu_seqlens_k),
        q_(ops.fwd.q.values),
        q_exp_(exponent_bytes(ops.fwd.q.exponents)),
        k_(ops.fwd.k.values),
        k_exp_(exponent_bytes(ops.fwd.k.exponents)),
        v_t_(ops.fwd.v_t),
        v_(ops.fwd.v.values),
        v_exp_(exponent_bytes(ops.fwd.v.exponents)),
        q_t_(ops.bwd.q_t),
        k_centered_t_(ops.bwd.k_centered_t),
        k_centered_exp_(exponent_bytes(ops.bwd.k_centered.exponents)),
        d_o_(ops.bwd.d_o.values),
        d_o_exp_(exponent_bytes(ops.bwd.d_o.exponents)),
        d_o_scaled_t_(ops.bwd.d_o_scaled_t),
        d_o_scaled_exp_(exponent_bytes(ops.bwd.d_o_scaled.exponents)),
        delta_(ops.bwd.delta),
        delta_bf16_(ops.bwd.delta_bf16),
        stats_(stats),
        q16_(in.q.bits),
        k16_(in.k.bits),
        k16_centered_(centered_key_bits(p, in)),
        v16_(in.v.bits),
        d_o16_(in.d_o.bits),
        static_exp_(exponent_bytes(ref::static_exponents_key_then_value(p))),
        dq_(p.total_q(), p.heads_q, p.head_dim),
        dk_(p.total_k(), p.heads_kv, p.head_dim),
        dv_(p.total_k(), p.heads_kv, p.head_dim) {}

  BackwardRun run(BackwardPrecision precision, bool deterministic, bool debug_p_hat = false) {
    BackwardKernelArgs a;
    a.shape = packed_shape_of(p_, cu_q_.get(), cu_k_.get());
    a.softmax_scale = p_.softmax_scale;
    a.precision = precision;
    a.deterministic = deterministic;
    auto exps = [](const DeviceBuffer<uint8_t>& e) { return reinterpret_cast<int8_t*>(e.get()); };
    a.fwd.q = {q_.get(), exps(q_exp_)};
    a.fwd.k = {k_.get(), exps(k_exp_)};
    a.fwd.v_t = {v_t_.get(), exps(v_exp_)};
    a.bwd.q_t = {q_t_.get(), exps(q_exp_)};
    a.bwd.k_centered_t = {k_centered_t_.get(), exps(k_centered_exp_)};
    a.bwd.v = {v_.get(), exps(v_exp_)};
    a.bwd.d_o = {d_o_.get(), exps(d_o_exp_)};
    a.bwd.d_o_scaled_t = {d_o_scaled_t_.get(), exps(d_o_scaled_exp_)};
    // fp8-bf16grad takes D from the BF16 dO (numerics §5 step 10)
    a.bwd.delta = precision == BackwardPrecision::kFp8Bf16Grad ? delta_bf16_.get() : delta_.get();
    const int64_t dq_pitch = int64_t(p_.heads_q) * p_.head_dim;
    const int64_t dk_pitch = int64_t(p_.heads_kv) * p_.head_dim;
    a.q = {q16_.get(), dq_pitch, p_.head_dim};
    // fp8-bf16grad reads K only for dQ, as BF16 k - k_first (the API makes that copy)
    a.k = {(precision == BackwardPrecision::kFp8Bf16Grad ? k16_centered_ : k16_).get(), dk_pitch,
           p_.head_dim};
    a.v = {v16_.get(), dk_pitch, p_.head_dim};
    a.d_o = {d_o16_.get(), dq_pitch, p_.head_dim};
    a.softmax_stats = stats_.get();
    if (p_.scale_mode == ScaleMode::kStatic)  // K's heads_kv exponents, then V's
      a.static_exponents = {exps(static_exp_), exps(static_exp_) + p_.heads_kv};
    dq_.poison();
    dk_.poison();
    dv_.poison();
    a.dq = dq_.view();
    a.dk = dk_.view();
    a.dv = dv_.view();
    DeviceBuffer<uint8_t> scratch(backward_scratch_bytes(a.shape, deterministic));
    scratch.poison();  // the kernel must zero what it accumulates into
    a.scratch = scratch.get();
    const size_t p_hat_count = debug_p_hat ? size_t(p_.heads_q) * p_.total_q() * p_.total_k() : 0;
    DeviceBuffer<float> p_hat(p_hat_count);
    if (debug_p_hat) {
      // NaN, not 0: the hook writes only visible pairs, and a visible P̂ it skipped must not read
      // as 0 (a legal P̂, and what an unwritten element of the forward's hook read as too).
      p_hat.poison();
      a.debug_p_hat = p_hat.get();
    }
    BackwardRun r;
    r.launch = launch_backward(a, nullptr);
    r.sync = cudaDeviceSynchronize();
    r.dq = dq_.bits();
    r.dk = dk_.bits();
    r.dv = dv_.bits();
    if (debug_p_hat) r.p_hat = p_hat.download();
    return r;
  }

 private:
  const ref::Problem& p_;
  DeviceBuffer<int32_t> cu_q_, cu_k_;
  DeviceBuffer<uint8_t> q_, q_exp_, k_, k_exp_, v_t_, v_, v_exp_, q_t_, k_centered_t_,
      k_centered_exp_, d_o_, d_o_exp_, d_o_scaled_t_, d_o_scaled_exp_;
  DeviceBuffer<float> delta_, delta_bf16_, stats_;
  DeviceBuffer<uint16_t> q16_, k16_, k16_centered_, v16_, d_o16_;
  DeviceBuffer<uint8_t> static_exp_;  // scale mode static (api_problem.h's layout)
  StridedOutput dq_, dk_, dv_;
};

// Number of elements that are NaN or infinite (a poisoned element never written reads NaN).
inline size_t count_not_finite(const std::vector<float>& x) {
  return size_t(std::count_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); }));
}

// ---- checks shared by the kernel test and the C API test ---------------------------------------

// numerics §7: target 1e-2; measured up to 1.4e-2 (dV of a 2049-token document, sink
// tokens): the FP8 tensor-core accumulation and P̂ rounding flips against the exact reference.
// The float64 criterion (kernel no worse than the contract's own error) is the binding one.
constexpr double kMaxErrorVsReference = 2e-2;
constexpr double kFloat64Factor = 1.1;  // kernel error <= 1.1 x reference error + 1e-3
constexpr double kFloat64Slack = 1e-3;
constexpr int kDeterministicRuns = 10;

// One gradient: finite everywhere, within kMaxErrorVsReference of the contract's reference, and
// no further from float64 than the reference is (up to factor and slack). `label` and `name`
// tag the printed measurement.
inline void expect_matches(const char* label, const std::string& name, const char* what,
                           const std::vector<float>& gpu, const std::vector<float>& expected,
                           const std::vector<double>& exact) {
  ASSERT_EQ(count_not_finite(gpu), 0u) << what << ": NaN/Inf or unwritten elements";
  const double err_vs_ref = ref::rel_l2(gpu, expected);
  const double err_gpu = ref::rel_l2(gpu, exact);
  const double err_ref = ref::rel_l2(expected, exact);
  EXPECT_LE(err_vs_ref, kMaxErrorVsReference) << what;
  EXPECT_LE(err_gpu, kFloat64Factor * err_ref + kFloat64Slack) << what;
  std::printf("[%s %s] %s: rel_l2 vs ref %.3g, vs f64 %.3g (ref %.3g)\n", label, name.c_str(), what,
              err_vs_ref, err_gpu, err_ref);
}

// dQ, dK and dV of repeat `run` bit for bit equal to those of the first run (any type with the
// three raw-bit vectors: BackwardRun, the API test's run).
template <typename Run>
void expect_same_gradients(const Run& again, const Run& first, int run) {
  EXPECT_TRUE(again.dq == first.dq) << "dQ differs in run " << run;
  EXPECT_TRUE(again.dk == first.dk) << "dK differs in run " << run;
  EXPECT_TRUE(again.dv == first.dv) << "dV differs in run " << run;
}

}  // namespace flamia::test
