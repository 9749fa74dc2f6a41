// One reference problem on the device, run through the public C API (flamia_forward and
// flamia_backward) with poisoned outputs: shared by the GPU suites that test the API end to end.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flamia/flamia.h"
#include "gpu_test_utils.h"
#include "reference/api_problem.h"
#include "reference/attention_ref.h"
#include "test_backward_support.h"

namespace flamia::test {

inline flamia_tensor dense(const DeviceBuffer<uint16_t>& b, int heads, int dim) {
  return {b.get(), int64_t(heads) * dim, dim};
}
inline flamia_tensor strided(const StridedOutput& out) {
  const Bf16MutableView v = out.view();
  return {v.data, v.token_stride, v.head_stride};
}

struct ApiRun {
  ref::HostTensor o;
  std::vector<float> stats;
  std::vector<uint16_t> dq, dk, dv;
};

// What a forward wrote: O, LSE and {M, l} as raw bits.
struct ForwardBits {
  std::vector<uint16_t> o;
  std::vector<float> lse, stats;
};

// One problem on the device, run through flamia_forward and flamia_backward.
class ApiProblem {
 public:
  ApiProblem(const ref::Problem& p, const ref::Inputs& in)
      : p_(p),
        cu_q_(p.cu_seqlens_q),
        cu_k_(p.cu_seqlens_k),
        q_(in.q.bits),
        k_(in.k.bits),
        v_(in.v.bits),
        d_o_(in.d_o.bits),
        o_(in.q.bits.size()),
        lse_(size_t(p.heads_q) * p.total_q()),
        stats_(size_t(p.heads_q) * p.total_q() * 2),
        kv_amax_(size_t(2) * p.heads_kv),
        dq_(p.total_q(), p.heads_q, p.head_dim),
        dk_(p.total_k(), p.heads_kv, p.head_dim),
        dv_(p.total_k(), p.heads_kv, p.head_dim) {
    // scale mode static: the heads' K and V exponents on the device, K's first
    const std::vector<int8_t> exponents = ref::static_exponents_key_then_value(p);
    if (!exponents.empty())
      static_exponents_ =
          DeviceBuffer<uint8_t>(std::vector<uint8_t>(exponents.begin(), exponents.end()));
    // key smoothing kVector: the vector on the device
    if (!p.smoothing_vector.empty()) smoothing_vector_ = DeviceBuffer<float>(p.smoothing_vector);
    problem_ = ref::api_problem(p, cu_q_.get(), cu_k_.get(), smoothing_vector_.get(),
                                reinterpret_cast<const int8_t*>(static_exponents_.get()));
  }

  // The forward once (its O and stats feed every backward run); with `save`, it keeps its
  // quantized operands in saved() (poisoned first). With `amax` it also writes the K/V amax
  // (kv_amax(); not with FUSED, which has none). `quantize`: flamia_forward_args.quantize.
  void forward(bool save = false, flamia_forward_quantize quantize = FLAMIA_QUANTIZE_AUTO,
               bool amax = true) {
    flamia_forward_args a = shared_args<flamia_forward_args>();
    a.quantize = quantize;
    if (save) {
      size_t saved_bytes = 0;
      ASSERT_EQ(flamia_saved_operands_size(&problem_, &saved_bytes), FLAMIA_OK)
          << flamia_last_error_message();
      saved_ = DeviceBuffer<uint8_t>(saved_bytes);
      saved_.poison();
      a.saved_operands = saved_.get();
      a.saved_operands_bytes = saved_bytes;
    }
    size_t bytes = 0;
    ASSERT_EQ(flamia_forward_workspace_size(&a, &bytes), FLAMIA_OK) << flamia_last_error_message();
    DeviceBuffer<uint8_t> workspace(bytes);
    a.workspace = workspace.get();
    a.workspace_bytes = bytes;
    workspace.poison();
    o_.poison();
    lse_.poison();
    stats_.poison();
    kv_amax_.poison();
    if (amax && quantize != FLAMIA_QUANTIZE_FUSED) a.kv_amax = kv_amax_.get();
    ASSERT_EQ(flamia_forward(&a), FLAMIA_OK) << flamia_last_error_message();
    ASSERT_EQ(flamia_check_device_status(a.workspace, nullptr), FLAMIA_OK);
    description_ = flamia_describe_forward(&a);
  }
  // flamia_forward's status for `quantize` (the workspace query's when that fails; the
  // outputs are not read).
  flamia_status forward_status(flamia_forward_quantize quantize) {
    flamia_forward_args a = shared_args<flamia_forward_args>();
    a.quantize = quantize;
    size_t bytes = 0;
    const flamia_status query = flamia_forward_workspace_size(&a, &bytes);
    if (query != FLAMIA_OK) return query;
    DeviceBuffer<uint8_t> workspace(bytes);
    a.workspace = workspace.get();
    a.workspace_bytes = bytes;
    const flamia_status status = flamia_forward(&a);
    return status != FLAMIA_OK ? status : flamia_check_device_status(a.workspace, nullptr);
  }
  // flamia_describe_forward of the last forward().
  const std::string& description() const { return description_; }
  // flamia_forward_args.kv_amax of the last forward(): K's maxima per KV head, then V's.
  std::vector<float> kv_amax() const { return kv_amax_.download(); }
  ForwardBits forward_bits() const { return {o_.download(), lse_.download(), stats_.download()}; }

  // The saved operands of the last forward(true) (or none).
  const DeviceBuffer<uint8_t>& saved() const { return saved_; }
  // A backward of another problem reads the buffer: the problem is changed by `mutate`.
  void mutate_problem(void (*mutate)(flamia_problem&)) { mutate(problem_); }

  // With `saved_operands`, the backward reads them and gets no q, k, v (NULL data).
  // `expected_status`: what flamia_check_device_status must report afterwards.
  void backward(flamia_precision precision, bool deterministic, ApiRun* run,
                const DeviceBuffer<uint8_t>* saved_operands = nullptr,
                flamia_status expected_status = FLAMIA_OK) {
    flamia_backward_args a = shared_args<flamia_backward_args>();
    if (saved_operands != nullptr) {
      a.saved_operands = saved_operands->get();
      a.saved_operands_bytes = saved_operands->size();
      a.q.data = a.k.data = a.v.data = nullptr;
    }
    a.d_o = dense(d_o_, p_.heads_q, p_.head_dim);
    a.dq = strided(dq_);
    a.dk = strided(dk_);
    a.dv = strided(dv_);
    a.precision = precision;
    a.deterministic = deterministic ? 1 : 0;
    size_t bytes = 0;
    ASSERT_EQ(flamia_backward_workspace_size(&a, &bytes), FLAMIA_OK) << flamia_last_error_message();
    DeviceBuffer<uint8_t> workspace(bytes);
    workspace.poison();
    a.workspace = workspace.get();
    a.workspace_bytes = bytes;
    dq_.poison();
    dk_.poison();
    dv_.poison();
    ASSERT_EQ(flamia_backward(&a), FLAMIA_OK) << flamia_last_error_message();
    ASSERT_EQ(flamia_check_device_status(a.workspace, nullptr), expected_status)
        << flamia_last_error_message();
    run->o = ref::HostTensor(p_.total_q(), p_.heads_q, p_.head_dim);
    run->o.bits = o_.download();
    run->stats = stats_.download();
    run->dq = dq_.bits();
    run->dk = dk_.bits();
    run->dv = dv_.bits();
  }

 private:
  // Zeroed flamia_forward_args or flamia_backward_args with the fields both have set: the
  // problem, Q, K, V and O (dense), LSE and {M, l}.
  template <typename Args>
  Args shared_args() const {
    Args a;
    std::memset(&a, 0, sizeof(a));
    a.problem = problem_;
    a.q = dense(q_, p_.heads_q, p_.head_dim);
    a.k = dense(k_, p_.heads_kv, p_.head_dim);
    a.v = dense(v_, p_.heads_kv, p_.head_dim);
    a.o = dense(o_, p_.heads_q, p_.head_dim);
    a.lse = lse_.get();
    a.softmax_stats = stats_.get();
    return a;
  }

  const ref::Problem& p_;
  flamia_problem problem_;
  DeviceBuffer<int32_t> cu_q_, cu_k_;
  DeviceBuffer<uint16_t> q_, k_, v_, d_o_, o_;
  DeviceBuffer<float> lse_, stats_, kv_amax_;
  StridedOutput dq_, dk_, dv_;
  DeviceBuffer<uint8_t> saved_;
  DeviceBuffer<uint8_t> static_exponents_;
  DeviceBuffer<float> smoothing_vector_;
  std::string description_;
};

}  // namespace flamia::test
