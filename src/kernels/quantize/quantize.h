// The fused quantize pass: BF16 -> E4M3 values + per-(head, token) power-of-two exponents in
// every layout the attention kernels read (docs/numerics.md §3). One read of each BF16 input.
//
// Every output pointer may be null: that copy (or exponent array) is then not written. Value
// pointers must be 16-byte aligned; inputs 16-byte aligned with strides that are multiples of 8
// elements. Argument errors return cudaErrorInvalidValue before anything is launched.
#pragma once

#include <cuda_runtime.h>

#include "common/layout.h"
#include "common/views.h"

namespace flamia {

struct QuantizeForwardArgs {
  PackedShape shape;
  ScaleMode scale_mode = ScaleMode::kExact;
  KeySmoothing key_smoothing = KeySmoothing::kNone;
  const float* key_smoothing_vector = nullptr;  // [heads_kv][head_dim] for kVector
  float softmax_scale = 1.0f;                   // for the LSE shift of key smoothing
  StaticExponents static_exponents;             // scale mode kStatic: K̂'s and V̂'s
  Bf16View q, k, v;
  ForwardOperands out;  // q, k, v_t (+ lse_shift when smoothing; zeros when kNone)
  // Skip all work when non-zero; an Inf in q, k or v records kDeviceStatusInfinite* there.
  int32_t* device_status = nullptr;
  HeadRange heads;                   // quantize only these heads (of every tensor and output above)
  bool general_kernel_only = false;  // tests: no job on the register kernels (the same bytes)
  // Optional, zeroed by the caller: [2][heads_kv] FP32, the max |K̂'s input| and |v| per KV
  // head over the tokens (atomic maxima: any number of passes may add to it).
  float* kv_amax = nullptr;
};

struct QuantizeBackwardArgs {
  PackedShape shape;
  ScaleMode scale_mode = ScaleMode::kExact;
  Bf16View q, k, v, o, d_o;
  const float* softmax_stats = nullptr;  // [heads_q][total_q][2] = {M, l}
  bool delta_from_bf16_d_o = false;      // fp8-bf16grad: D = dO . O (else 2^edo dÔ . O)
  BackwardOperands out;
  int32_t* device_status = nullptr;  // as QuantizeForwardArgs' (and an Inf in dO)
  // Optional: the backward's FP32 dQ buffer, [heads_q][total_q][dq_row_floats] floats, which
  // the dO job's CTAs zero for their tokens (instead of a memset: the stores hide in the job's
  // latency-bound phases). dq_row_floats * 4 must be a multiple of 16 bytes.
  float* dq_buffer = nullptr;
  int dq_row_floats = 0;
  // Optional (extension): the forward's copies rebuilt from the same read of q, k, v, so the
  // backward needs one quantize pass in all. fwd_out.q/k/v_t as in QuantizeForwardArgs (K̂
  // from k - m with the smoothing below); lse_shift is written too when non-null.
  ForwardOperands fwd_out;
  KeySmoothing key_smoothing = KeySmoothing::kNone;
  const float* key_smoothing_vector = nullptr;  // [heads_kv][head_dim] for kVector
  float softmax_scale = 1.0f;                   // only for fwd_out.lse_shift
  StaticExponents static_exponents;             // scale mode kStatic: K̂'s and V̂'s (and V̂)
  HeadRange heads;                   // quantize only these heads (of every tensor and output above)
  float* kv_amax = nullptr;          // as QuantizeForwardArgs's: of the copies written to fwd_out
  bool general_kernel_only = false;  // as QuantizeForwardArgs's
};

// Head dims the quantize pass is compiled for (64, 128, 256).
bool quantize_supports_head_dim(int head_dim);

cudaError_t launch_quantize_forward(const QuantizeForwardArgs& args, cudaStream_t stream);
cudaError_t launch_quantize_backward(const QuantizeBackwardArgs& args, cudaStream_t stream);

// fp8-bf16grad's dQ operand: BF16 k - k_first(doc) into `out`, dense
// [total_k][heads_kv][head_dim] (numerics §5 step 10). Skipped when *device_status != 0.
cudaError_t launch_center_keys_bf16(const PackedShape& shape, Bf16View k, void* out,
                                    const int32_t* device_status, cudaStream_t stream);

}  // namespace flamia
