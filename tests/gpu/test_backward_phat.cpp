// Does the backward see the forward's P̂? The forward kernel and the backward kernel both run
// on the reference's operands; each writes the real value of every P̂ it used (debug hooks:
// BackwardKernelArgs::debug_p_hat and ForwardKernelArgs::debug_p_hat:
// e4m3_decode(P̂) * 2^(M_running - 8)). The backward runs with the GPU forward's {M, l}, as in
// training. Differences are expected only where the forward's early key tiles used a smaller
// running M (E4M3's subnormal range, where the forward keeps a little more tail) and at rare
// rounding boundaries of t - M and of the exponentials (the forward's exp2_polynomial columns
// against the backward's ex2.approx, numerics §4); the test reports both rates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test_utils.h"
#include "kernels/forward/forward.h"
#include "reference/api_problem.h"
#include "reference/attention_ref.h"
#include "test_backward_support.h"

namespace flamia::test {
namespace {

constexpr float kE4M3MinNormal = 0.015625f;  // 2^-6: below it P̂ is subnormal
// The bound: the forward's exp2_polynomial columns (head dim 128) round to another E4M3
// value than the backward's ex2.approx for a few per million (test_softmax_numerics.cu).
constexpr double kMaxNormalRangeMismatch = 1e-6;

// The forward's debug hook: a rename must break the build, not skip the test.
template <typename Args, typename = void>
struct HasDebugHook : std::false_type {};
template <typename Args>
struct HasDebugHook<Args, std::void_t<decltype(std::declval<Args&>().debug_p_hat)>>
    : std::true_type {};
static_assert(HasDebugHook<ForwardKernelArgs>::value, "ForwardKernelArgs::debug_p_hat");

struct ForwardRun {
  ref::HostTensor o;
  std::vector<float> stats;
  std::vector<float> p_hat;
};

ForwardRun run_forward_kernel(const ref::Problem& problem, const HostOperands& ops) {
  DeviceBuffer<int32_t> cu_q(problem.cu_seqlens_q), cu_k(problem.cu_seqlens_k);
  DeviceBuffer<uint8_t> q(ops.fwd.q.values), k(ops.fwd.k.values), v_t(ops.fwd.v_t);
  DeviceBuffer<uint8_t> q_exp(exponent_bytes(ops.fwd.q.exponents)),
      k_exp(exponent_bytes(ops.fwd.k.exponents)), v_exp(exponent_bytes(ops.fwd.v.exponents));
  DeviceBuffer<float> lse_shift(ops.fwd.lse_shift);
  // scale mode static: the forward without per-key factors, given the heads' exponents
  DeviceBuffer<uint8_t> static_exp(exponent_bytes(ref::static_exponents_key_then_value(problem)));
  const size_t rows = size_t(problem.heads_q) * problem.total_q();
  DeviceBuffer<uint16_t> o(rows * problem.head_dim);
  DeviceBuffer<float> lse(rows), stats(rows * 2);
  const size_t p_hat_count = rows * problem.total_k();
  DeviceBuffer<float> p_hat(p_hat_count);
  // NaN, not 0: the hooks write only visible pairs, and a visible P̂ that neither the forward's
  // nor the backward's hook wrote read as 0 in both, equal and "subnormal", so never counted.
  // O and {M, l} (the backward's inputs) poisoned too, so that a row not written is seen.
  p_hat.poison();
  o.poison();
  lse.poison();
  stats.poison();

  ForwardKernelArgs args;
  args.shape = packed_shape_of(problem, cu_q.get(), cu_k.get());
  args.softmax_scale = problem.softmax_scale;
  args.in.q = {q.get(), reinterpret_cast<int8_t*>(q_exp.get())};
  args.in.k = {k.get(), reinterpret_cast<int8_t*>(k_exp.get())};
  args.in.v_t = {v_t.get(), reinterpret_cast<int8_t*>(v_exp.get())};
  args.in.lse_shift = ops.fwd.lse_shift.empty() ? nullptr : lse_shift.get();
  if (problem.scale_mode == ScaleMode::kStatic) {
    const int8_t* exponents = reinterpret_cast<int8_t*>(static_exp.get());
    args.static_exponents = {exponents, exponents + problem.heads_kv};
  }
  args.o = {o.get(), int64_t(problem.heads_q) * problem.head_dim, problem.head_dim};
  args.lse = lse.get();
  args.softmax_stats = stats.get();
  DeviceBuffer<uint8_t> schedule(forward_scheduler_workspace_bytes(args.shape));
  args.scheduler_workspace = schedule.get();
  ForwardRun run;
  args.debug_p_hat = p_hat.get();
  EXPECT_EQ(launch_forward(args, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  run.o = ref::HostTensor(problem.total_q(), problem.heads_q, problem.head_dim);
  run.o.bits = o.download();
  run.stats = stats.download();
  run.p_hat = p_hat.download();
  return run;
}

class BackwardForwardProbabilityTest : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardForwardProbabilityTest, BackwardSeesForwardProbabilities) {
  FLAMIA_REQUIRE_SM90();
  const BackwardCase& c = GetParam();
  const ref::Problem problem = make_case_problem(c);
  const ref::Inputs inputs = make_case_inputs(c, problem);
  const ref::ForwardOperandsRef fwd_ops = ref::quantize_forward_operands(problem, inputs);
  const ForwardRun forward = run_forward_kernel(problem, {fwd_ops, {}});
  ASSERT_EQ(count_not_finite(forward.stats), 0u) << "the forward's {M, l} not written";

  const HostOperands ops = make_host_operands(problem, inputs, forward.o, forward.stats);
  DeviceBackwardProblem device(problem, inputs, ops, forward.stats);
  const BackwardRun backward = device.run(c.precision, false, /*debug_p_hat=*/true);
  ASSERT_EQ(backward.sync, cudaSuccess) << cudaGetErrorString(backward.sync);

  const int total_q = problem.total_q(), total_k = problem.total_k();
  size_t normal = 0, normal_differ = 0, subnormal = 0, subnormal_differ = 0;
  size_t forward_not_written = 0, backward_not_written = 0;  // visible P̂ still NaN poison
  for (int h = 0; h < problem.heads_q; ++h)
    for (int b = 0; b < problem.batch(); ++b)
      for (int i = problem.cu_seqlens_q[b]; i < problem.cu_seqlens_q[b + 1]; ++i) {
        const float m = forward.stats[(size_t(h) * total_q + i) * 2];
        const float unit = exp2_int(kSoftmaxOffset - int(m));  // back to units of 2^(M - 8)
        const int keys = problem.causal ? i - problem.cu_seqlens_q[b] + 1
                                        : problem.cu_seqlens_k[b + 1] - problem.cu_seqlens_k[b];
        const int window = problem.sliding_window;
        const int first = window > 0 && keys - window > 0 ? keys - window : 0;
        for (int jj = first; jj < keys; ++jj) {
          const size_t at = (size_t(h) * total_q + i) * total_k + problem.cu_seqlens_k[b] + jj;
          const float f = forward.p_hat[at] * unit, g = backward.p_hat[at] * unit;
          forward_not_written += !std::isfinite(f);
          backward_not_written += !std::isfinite(g);
          const bool differs = f != g;
          if (std::max(f, g) >= kE4M3MinNormal) {
            ++normal;
            normal_differ += differs;
          } else {
            ++subnormal;
            subnormal_differ += differs;
          }
        }
      }
  std::printf(
      "[P̂ fwd vs bwd %s] normal range: %zu of %zu differ (%.3g); subnormal: %zu of %zu "
      "(%.3g)\n",
      c.name.c_str(), normal_differ, normal, normal ? double(normal_differ) / normal : 0.0,
      subnormal_differ, subnormal, subnormal ? double(subnormal_differ) / subnormal : 0.0);
  EXPECT_GT(normal, 0u);
  EXPECT_EQ(forward_not_written, 0u) << "visible P̂ the forward's hook did not write";
  EXPECT_EQ(backward_not_written, 0u) << "visible P̂ the backward's hook did not write";
  EXPECT_LE(double(normal_differ), kMaxNormalRangeMismatch * double(normal) + 1.0);
}

std::vector<BackwardCase> cases() {
  BackwardCase causal{"d128_causal", {700, 17, 300}, {}, 2, 1, 128, true};
  BackwardCase full{"d64_full", {300, 113}, {}, 2, 2, 64, false};
  BackwardCase sink{"d128_causal_sink", {500, 64}, {}, 2, 2, 128, true};
  sink.sink = true;
  // short documents packed into shared forward work items (scheduler.cu)
  BackwardCase packed{"d128_causal_packed", {5, 17, 40, 3, 64, 1, 30, 200}, {}, 2, 1, 128, true};
  BackwardCase packed_full{"d64_full_packed", {9, 60, 2, 33, 1}, {}, 2, 2, 64, false};
  BackwardCase window{"d128_causal_window100", {700, 17, 300}, {}, 2, 1, 128, true};
  window.sliding_window = 100;
  BackwardCase packed_window{
      "d64_causal_packed_window9", {5, 17, 40, 3, 64, 1, 30, 200}, {}, 2, 1, 64, true};
  packed_window.sliding_window = 9;
  // scale mode static: the forward's softmax without per-key factors (online_softmax.cuh)
  BackwardCase causal_static{"d128_causal_static", {700, 17, 300}, {}, 2, 1, 128, true,
                             ScaleMode::kStatic};
  BackwardCase packed_static{"d64_full_packed_static", {9, 60, 2, 33, 1, 300}, {}, 2, 2, 64, false,
                             ScaleMode::kStatic};
  return {causal, full,          sink,          packed,       packed_full,
          window, packed_window, causal_static, packed_static};
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardForwardProbabilityTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flamia::test
