// Public structs -> launcher arguments, and the launch sequences (dispatch.h).
//
// Problems with no keys or no queries never reach the attention kernels: their outputs are
// defined without them (docs/numerics.md §4.9: no visible key gives O = 0, LSE = -inf, stats
// {0, 0}; no queries give dK = dV = 0; no keys give dQ = 0), so the kernels only ever see
// total_q > 0 and total_k > 0.
#include "api/dispatch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "api/device_checks.h"
#include "api/errors.h"
#include "api/overlap.h"
#include "api/saved_operands.h"
#include "common/device_info.h"
#include "kernels/backward/backward.h"
#include "kernels/forward/forward.h"
#include "kernels/quantize/quantize.h"

namespace flamia::api {
namespace {

ScaleMode to_scale_mode(flamia_scale_mode mode) {
  return mode == FLAMIA_SCALE_BLOCK32  ? ScaleMode::kBlock32
         : mode == FLAMIA_SCALE_STATIC ? ScaleMode::kStatic
                                       : ScaleMode::kExact;
}

StaticExponents static_exponents(const flamia_problem& p) {
  return {p.static_key_exponents, p.static_value_exponents};
}

KeySmoothing to_key_smoothing(flamia_key_smoothing smoothing) {
  switch (smoothing) {
    case FLAMIA_SMOOTH_FIRST_KEY:
      return KeySmoothing::kFirstKey;
    case FLAMIA_SMOOTH_VECTOR:
      return KeySmoothing::kVector;
    case FLAMIA_SMOOTH_NONE:
      break;
  }
  return KeySmoothing::kNone;
}

BackwardPrecision to_precision(flamia_precision precision) {
  return precision == FLAMIA_PRECISION_FP8_BF16GRAD ? BackwardPrecision::kFp8Bf16Grad
                                                    : BackwardPrecision::kFp8;
}

Bf16View input_view(const flamia_tensor& t) {
  return {t.data, t.token_stride, t.head_stride};
}
Bf16MutableView output_view(const flamia_tensor& t) {
  return {t.data, t.token_stride, t.head_stride};
}

FillBf16 fill_target(const flamia_tensor& t, int tokens, int heads) {
  FillBf16 target;
  target.data = t.data;
  target.token_stride = t.token_stride;
  target.head_stride = t.head_stride;
  target.tokens = tokens;
  target.heads = heads;
  return target;
}

int64_t per_row_count(const flamia_problem& p) {
  return int64_t(p.heads_q) * p.total_q;
}

// O, LSE and (when given) the softmax stats of the forward, with the values a fill writes.
FillTargets forward_outputs(const flamia_forward_args& a, uint16_t o_bits, float lse_value,
                            float stats_value) {
  const flamia_problem& p = a.problem;
  FillTargets targets;
  targets.head_dim = p.head_dim;
  targets.bf16_bits = o_bits;
  targets.add(fill_target(a.o, p.total_q, p.heads_q));
  targets.add(FillFloats{a.lse, per_row_count(p), lse_value});
  targets.add(FillFloats{a.softmax_stats, per_row_count(p) * kSoftmaxStatsPerRow, stats_value});
  targets.add(FillFloats{a.kv_amax, kv_amax_count(p), stats_value});
  return targets;
}

FillTargets backward_outputs(const flamia_backward_args& a, uint16_t bits) {
  const flamia_problem& p = a.problem;
  FillTargets targets;
  targets.head_dim = p.head_dim;
  targets.bf16_bits = bits;
  targets.add(fill_target(a.dq, p.total_q, p.heads_q));
  targets.add(fill_target(a.dk, p.total_k, p.heads_kv));
  targets.add(fill_target(a.dv, p.total_k, p.heads_kv));
  return targets;
}

QuantizeForwardArgs quantize_forward_args(const flamia_forward_args& a, const WorkspaceLayout& ws) {
  const flamia_problem& p = a.problem;
  QuantizeForwardArgs args;
  args.shape = packed_shape(p);
  args.scale_mode = to_scale_mode(p.scale_mode);
  args.key_smoothing = to_key_smoothing(p.key_smoothing);
  args.key_smoothing_vector = p.key_smoothing_vector;
  args.softmax_scale = p.softmax_scale;
  args.static_exponents = static_exponents(p);
  args.q = input_view(a.q);
  args.k = input_view(a.k);
  args.v = input_view(a.v);
  args.out = ws.fwd;
  args.device_status = &ws.status->code;
  args.kv_amax = a.kv_amax;
  return args;
}

// The forward keeping its operands: the backward's Q, K and V jobs, which write the forward's
// copies (and the LSE shift) from the same read, plus Q̂ᵀ, K̂cᵀ and V̂ into the saved buffer.
QuantizeBackwardArgs quantize_saved_operands_args(const flamia_forward_args& a,
                                                  const WorkspaceLayout& ws) {
  const QuantizeForwardArgs fwd = quantize_forward_args(a, ws);
  QuantizeBackwardArgs args;
  args.shape = fwd.shape;
  args.scale_mode = fwd.scale_mode;
  args.key_smoothing = fwd.key_smoothing;
  args.key_smoothing_vector = fwd.key_smoothing_vector;
  args.softmax_scale = fwd.softmax_scale;
  args.static_exponents = fwd.static_exponents;
  args.q = fwd.q;
  args.k = fwd.k;
  args.v = fwd.v;
  args.fwd_out = ws.fwd;
  args.out.q_t = ws.bwd.q_t;
  args.out.k_centered_t = ws.bwd.k_centered_t;
  args.out.v = ws.bwd.v;  // no dO job: d_o, d_o_scaled_t and delta stay null
  args.device_status = fwd.device_status;
  args.kv_amax = fwd.kv_amax;
  return args;
}

// The workspace with the copies of Q, K and V pointed at the saved-operands buffer (the
// workspace's own lse_shift is kept). The forward writes all six copies there (its quantize
// args take Q̂ᵀ, K̂cᵀ and V̂ from ws.bwd); the backward reads them.
WorkspaceLayout with_saved_operands(WorkspaceLayout ws, const flamia_problem& p,
                                    const void* saved_operands) {
  if (saved_operands == nullptr) return ws;
  const SavedOperandsLayout saved = layout_saved_operands(packed_shape(p), saved_operands);
  float* lse_shift = ws.fwd.lse_shift;
  ws.fwd = saved.fwd;
  ws.fwd.lse_shift = lse_shift;
  ws.bwd.q_t = saved.q_t;
  ws.bwd.k_centered_t = saved.k_centered_t;
  ws.bwd.v = saved.v;
  return ws;
}

}  // namespace

// FUSED only: AUTO takes the separate pass, the faster one on every shape measured
// (docs/results-log.md, fused quantization). Validation rejects FUSED where it has no kernel.
bool forward_fuses_quantize(const flamia_forward_args& a) {
  return a.quantize == FLAMIA_QUANTIZE_FUSED;
}

OverlapPlan forward_overlap_plan(const flamia_forward_args& a) {
  if (forward_fuses_quantize(a)) return OverlapPlan{};
  return plan_forward_overlap(packed_shape(a.problem), current_multiprocessors(),
                              std::getenv(kOverlapEnvironment), a.saved_operands != nullptr);
}

namespace {

// The quantize pass of the forward (with saved operands: every copy the backward reads too),
// for the heads of `heads`.
flamia_status quantize_forward_inputs(const flamia_forward_args& a, const WorkspaceLayout& ws,
                                      const HeadRange& heads, cudaStream_t stream,
                                      const char* where) {
  if (a.saved_operands != nullptr) {
    QuantizeBackwardArgs args = quantize_saved_operands_args(a, ws);
    args.heads = heads;
    const cudaError_t error = launch_quantize_backward(args, stream);
    return error == cudaSuccess ? FLAMIA_OK
                                : fail_cuda(where, "launch_quantize_backward (saved)", error);
  }
  QuantizeForwardArgs args = quantize_forward_args(a, ws);
  args.heads = heads;
  const cudaError_t error = launch_quantize_forward(args, stream);
  return error == cudaSuccess ? FLAMIA_OK : fail_cuda(where, "launch_quantize_forward", error);
}

// The quantize pass and the attention per chunk of KV heads, overlapped (overlap.h): chunk c's
// quantization on the quantize stream, its attention on an attention stream once that is done,
// capped to plan.attention_ctas CTAs while later chunks are still to be quantized. `*ran` is
// false when the internal streams are taken by another CUDA graph capture (nothing launched).
flamia_status run_overlapped_forward(const flamia_forward_args& a, const WorkspaceLayout& ws,
                                     ForwardKernelArgs kernel, const OverlapPlan& plan,
                                     cudaStream_t stream, const char* where, bool* ran) {
  const int chunk_heads = kernel.shape.heads_kv / plan.chunks;
  kernel.heads = HeadRange{0, chunk_heads};
  // Every chunk's plan (the same heads), on the caller's stream before the fork (were the
  // streams taken, the plain path plans again, for all heads).
  cudaError_t error = launch_forward_plan(kernel, stream);
  if (error != cudaSuccess) return fail_cuda(where, "launch_forward_plan", error);
  kernel.plan_ready = true;
  ForkedStreams streams;
  error = streams.fork(stream, plan.attention_streams, ran);
  if (error != cudaSuccess) return fail_cuda(where, "forking the overlap streams", error);
  if (!*ran) return FLAMIA_OK;
  flamia_status status = FLAMIA_OK;
  for (int c = 0; c < plan.chunks && status == FLAMIA_OK; ++c) {
    kernel.heads.kv_begin = c * chunk_heads;
    status = quantize_forward_inputs(a, ws, kernel.heads, streams.quantize(), where);
    if (status != FLAMIA_OK) break;
    error = streams.hand_over(c);
    if (error != cudaSuccess) {
      status = fail_cuda(where, "handing a chunk to attention", error);
      break;
    }
    kernel.max_ctas = c + 1 < plan.chunks ? plan.attention_ctas : 0;
    error = launch_forward(kernel, streams.attention(c));
    if (error != cudaSuccess) status = fail_cuda(where, "launch_forward (chunk)", error);
  }
  // Always: the caller's stream then waits for whatever was launched.
  error = streams.join(stream);
  if (status == FLAMIA_OK && error != cudaSuccess)
    status = fail_cuda(where, "joining the overlap streams", error);
  return status;
}

// The forward with keys and queries: quantize, then the attention kernel (overlapped per chunk
// of heads where the plan says so); or the attention kernel alone, quantizing as it goes
// (forward_fuses_quantize).
flamia_status run_forward_kernels(const flamia_forward_args& a, const WorkspaceLayout& ws,
                                  cudaStream_t stream, const char* where) {
  const flamia_problem& p = a.problem;
  ForwardKernelArgs kernel;
  kernel.shape = packed_shape(p);
  kernel.softmax_scale = p.softmax_scale;
  kernel.static_exponents = static_exponents(p);  // null unless FLAMIA_SCALE_STATIC
  kernel.in = ws.fwd;
  kernel.o = output_view(a.o);
  kernel.lse = a.lse;
  kernel.softmax_stats = a.softmax_stats;
  kernel.device_status = &ws.status->code;
  kernel.scheduler_workspace = ws.scheduler;
  if (a.kv_amax != nullptr) {  // the quantize jobs take their maxima into it
    const cudaError_t error =
        cudaMemsetAsync(a.kv_amax, 0, size_t(kv_amax_count(p)) * sizeof(float), stream);
    if (error != cudaSuccess) return fail_cuda(where, "zeroing kv_amax", error);
  }
  if (forward_fuses_quantize(a)) {
    kernel.fused.enabled = true;
    kernel.fused.q = input_view(a.q);
    kernel.fused.k = input_view(a.k);
    kernel.fused.v = input_view(a.v);
    kernel.fused.scale_mode = to_scale_mode(p.scale_mode);
  } else {
    const OverlapPlan plan = forward_overlap_plan(a);
    if (plan.overlapped()) {
      bool ran = false;
      const flamia_status overlapped =
          run_overlapped_forward(a, ws, kernel, plan, stream, where, &ran);
      if (overlapped != FLAMIA_OK || ran) return overlapped;
    }
    const flamia_status status = quantize_forward_inputs(a, ws, HeadRange{}, stream, where);
    if (status != FLAMIA_OK) return status;
    // The pass launches its Q job whenever launch_forward launches anything (total_q > 0).
    kernel.plan_after_quantize_pass = true;
  }
  const cudaError_t error = launch_forward(kernel, stream);
  if (error != cudaSuccess) return fail_cuda(where, "launch_forward", error);
  return FLAMIA_OK;
}

// The backward with keys and queries: one quantize pass builds the forward's copies (as the
// forward read them) and the backward's, then the backward kernels. With saved operands the
// copies of Q, K and V are the forward's, and the pass runs only its dO job.
flamia_status run_backward_kernels(const flamia_backward_args& a, const WorkspaceLayout& ws,
                                   cudaStream_t stream, const char* where) {
  const flamia_problem& p = a.problem;
  const bool saved = a.saved_operands != nullptr;
  QuantizeBackwardArgs quantize;
  quantize.shape = packed_shape(p);
  quantize.scale_mode = to_scale_mode(p.scale_mode);
  quantize.o = input_view(a.o);
  quantize.d_o = input_view(a.d_o);
  quantize.softmax_stats = a.softmax_stats;
  quantize.delta_from_bf16_d_o = a.precision == FLAMIA_PRECISION_FP8_BF16GRAD;
  quantize.out = ws.bwd;
  quantize.device_status = &ws.status->code;
  // The dO job zeroes the backward's FP32 dQ buffer (no memset in launch_backward).
  quantize.dq_buffer = backward_dq_buffer(ws.scratch);
  quantize.dq_row_floats = backward_dq_row_floats(p.head_dim);
  if (saved) {
    quantize.out.q_t = {};
    quantize.out.k_centered_t = {};
    quantize.out.v = {};
  } else {
    quantize.q = input_view(a.q);
    quantize.k = input_view(a.k);
    quantize.v = input_view(a.v);
    quantize.fwd_out = ws.fwd;  // lse_shift is null: the backward does not need it
  }
  quantize.key_smoothing = to_key_smoothing(p.key_smoothing);
  quantize.key_smoothing_vector = p.key_smoothing_vector;
  quantize.softmax_scale = p.softmax_scale;
  quantize.static_exponents = static_exponents(p);
  const cudaError_t quantize_error = launch_quantize_backward(quantize, stream);
  if (quantize_error != cudaSuccess) {
    return fail_cuda(where, "launch_quantize_backward", quantize_error);
  }

  BackwardKernelArgs kernel;
  kernel.shape = packed_shape(p);
  kernel.softmax_scale = p.softmax_scale;
  kernel.precision = to_precision(a.precision);
  kernel.deterministic = a.deterministic != 0;
  kernel.fwd = ws.fwd;
  kernel.bwd = ws.bwd;
  kernel.q = input_view(a.q);
  kernel.k = input_view(a.k);
  if (ws.centered_bf16_keys != nullptr) {
    // fp8-bf16grad reads K only for dQ: it reads k - k_first (numerics §5 step 10)
    const cudaError_t center_error = launch_center_keys_bf16(
        kernel.shape, kernel.k, ws.centered_bf16_keys, &ws.status->code, stream);
    if (center_error != cudaSuccess)
      return fail_cuda(where, "launch_center_keys_bf16", center_error);
    const int64_t head_stride = p.head_dim;
    kernel.k = {ws.centered_bf16_keys, head_stride * p.heads_kv, head_stride};
  }
  kernel.v = input_view(a.v);
  kernel.d_o = input_view(a.d_o);
  kernel.softmax_stats = a.softmax_stats;
  kernel.static_exponents = static_exponents(p);
  kernel.dq = output_view(a.dq);
  kernel.dk = output_view(a.dk);
  kernel.dv = output_view(a.dv);
  kernel.device_status = &ws.status->code;
  kernel.scratch = ws.scratch;
  kernel.dq_buffer_zeroed = quantize.dq_buffer != nullptr;
  // Launched above (in fp8-bf16grad the centered keys come between; the schedule reads neither).
  kernel.schedule_after_quantize_pass = true;
  const cudaError_t error = launch_backward(kernel, stream);
  if (error != cudaSuccess) return fail_cuda(where, "launch_backward", error);
  return FLAMIA_OK;
}

// `write_saved` (forward) or `expect_saved` (backward): the saved-operands buffer whose header
// the check writes or compares (device_checks.h).
flamia_status check_seqlens_on_device(const flamia_problem& p, const WorkspaceLayout& ws,
                                      const void* write_saved, const void* expect_saved,
                                      cudaStream_t stream, const char* where) {
  SavedOperandsCheck saved;
  saved.expected = saved_operands_header(p);
  if (write_saved != nullptr)
    saved.write = layout_saved_operands(packed_shape(p), write_saved).header;
  if (expect_saved != nullptr)
    saved.compare_with = layout_saved_operands(packed_shape(p), expect_saved).header;
  const cudaError_t error = launch_check_seqlens(p.cu_seqlens_q, p.cu_seqlens_k, seqlens_limits(p),
                                                 saved, ws.status, stream);
  return error == cudaSuccess ? FLAMIA_OK : fail_cuda(where, "the cu_seqlens check kernel", error);
}

flamia_status fill(const FillTargets& targets, cudaStream_t stream, const char* where) {
  const cudaError_t error = launch_fill_outputs(nullptr, targets, stream);
  return error == cudaSuccess ? FLAMIA_OK : fail_cuda(where, "the output fill kernel", error);
}

// NaN over every output when the device check failed (the kernels skipped their work).
flamia_status poison(const WorkspaceLayout& ws, const FillTargets& targets, cudaStream_t stream,
                     const char* where) {
  const cudaError_t error = launch_fill_outputs(&ws.status->code, targets, stream);
  return error == cudaSuccess ? FLAMIA_OK : fail_cuda(where, "the NaN poison kernel", error);
}

}  // namespace

PackedShape packed_shape(const flamia_problem& p) {
  PackedShape shape;
  shape.cu_seqlens_q = p.cu_seqlens_q;
  shape.cu_seqlens_k = p.cu_seqlens_k;
  shape.batch = p.batch;
  shape.total_q = p.total_q;
  shape.total_k = p.total_k;
  shape.heads_q = p.heads_q;
  shape.heads_kv = p.heads_kv;
  shape.head_dim = p.head_dim;
  // No document is longer than its side's total: a larger max_seqlen (a loose bound a caller
  // may pass) sizes nothing beyond the totals, and the sizes derived from it stay in range.
  shape.max_seqlen_q = std::min(p.max_seqlen_q, p.total_q);
  shape.max_seqlen_k = std::min(p.max_seqlen_k, p.total_k);
  shape.causal = p.causal != 0;
  // A window at least as long as every document is no window (numerics §4.3: the same bits),
  // so it runs the kernels without one, and no window size reaches the kernels' 32-bit sums.
  shape.sliding_window = p.sliding_window >= shape.max_seqlen_k ? 0 : p.sliding_window;
  return shape;
}

SeqlensLimits seqlens_limits(const flamia_problem& p) {
  SeqlensLimits limits;
  limits.batch = p.batch;
  limits.total_q = p.total_q;
  limits.total_k = p.total_k;
  limits.max_seqlen_q = p.max_seqlen_q;
  limits.max_seqlen_k = p.max_seqlen_k;
  limits.causal = p.causal != 0;
  return limits;
}

WorkspaceRequest forward_workspace_request(const flamia_forward_args& args) {
  WorkspaceRequest request;
  request.shape = packed_shape(args.problem);
  request.pass = Pass::kForward;
  request.key_smoothing = args.problem.key_smoothing != FLAMIA_SMOOTH_NONE;
  request.saved_operands = args.saved_operands != nullptr;
  return request;
}

WorkspaceRequest backward_workspace_request(const flamia_backward_args& args) {
  WorkspaceRequest request;
  request.shape = packed_shape(args.problem);
  request.pass = Pass::kBackward;
  request.key_smoothing = false;  // K̂ is built from k - m, but no LSE shift is needed
  request.deterministic = args.deterministic != 0;
  request.centered_bf16_keys = args.precision == FLAMIA_PRECISION_FP8_BF16GRAD;
  request.saved_operands = args.saved_operands != nullptr;
  return request;
}

flamia_status dispatch_forward(const flamia_forward_args& a, const char* where) {
  const flamia_problem& p = a.problem;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const WorkspaceLayout ws = with_saved_operands(
      layout_workspace(forward_workspace_request(a), a.workspace), p, a.saved_operands);
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

  flamia_status status = check_seqlens_on_device(p, ws, a.saved_operands, nullptr, stream, where);
  if (status != FLAMIA_OK) return status;
  if (p.total_k == 0) {
    status = fill(forward_outputs(a, kBf16ZeroBits, kMinusInf, 0.0f), stream, where);
  } else {
    status = run_forward_kernels(a, ws, stream, where);
  }
  if (status != FLAMIA_OK) return status;
  return poison(ws, forward_outputs(a, kBf16NanBits, kNaN, kNaN), stream, where);
}

flamia_status dispatch_backward(const flamia_backward_args& a, const char* where) {
  const flamia_problem& p = a.problem;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const WorkspaceLayout ws = with_saved_operands(
      layout_workspace(backward_workspace_request(a), a.workspace), p, a.saved_operands);

  // With an empty side nothing reads the saved operands (a forward without queries never ran).
  const void* expect_saved = p.total_q > 0 && p.total_k > 0 ? a.saved_operands : nullptr;
  flamia_status status = check_seqlens_on_device(p, ws, nullptr, expect_saved, stream, where);
  if (status != FLAMIA_OK) return status;
  if (p.total_q == 0 || p.total_k == 0) {
    // One side is empty: the other side's gradients are zero (the empty side has no elements).
    status = fill(backward_outputs(a, kBf16ZeroBits), stream, where);
  } else {
    status = run_backward_kernels(a, ws, stream, where);
  }
  if (status != FLAMIA_OK) return status;
  return poison(ws, backward_outputs(a, kBf16NanBits), stream, where);
}

}  // namespace flamia::api
