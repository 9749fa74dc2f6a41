// The FP8 backward attention kernels (sm_90a), numerically matched to the forward.
#pragma once

#include <cuda_runtime.h>

#include "common/layout.h"
#include "common/views.h"

namespace flamia {

struct BackwardKernelArgs {
  PackedShape shape;
  float softmax_scale = 1.0f;
  BackwardPrecision precision = BackwardPrecision::kFp8;
  bool deterministic = false;
  ForwardOperands fwd;                   // Q̂, K̂, V̂ᵀ as the forward read them
  BackwardOperands bwd;                  // Q̂ᵀ, K̂cᵀ, V̂, dÔ, dO''ᵀ, D
  Bf16View q, k, v, d_o;                 // BF16 inputs (for precision kFp8Bf16Grad)
  const float* softmax_stats = nullptr;  // [heads_q][total_q][2] = {M, l}
  // Scale mode kStatic: the kernels whose P̂ rebuild folds the head's exponents per query row
  // (numerics §4, static).
  StaticExponents static_exponents;
  Bf16MutableView dq, dk, dv;
  const int32_t* device_status = nullptr;
  void* scratch = nullptr;  // backward_scratch_bytes(shape, deterministic)
  // Whether the FP32 dQ buffer at the start of the scratch (backward_dq_buffer) is zero
  // already (the quantize pass's dO job zeroes it, QuantizeBackwardArgs::dq_buffer); else
  // launch_backward zeroes it first.
  bool dq_buffer_zeroed = false;
  // The launch before on the stream is the quantize pass (it writes nothing the schedule reads):
  // with nothing zeroed here, the schedule may start while it finishes (dependent_launch.cuh).
  bool schedule_after_quantize_pass = false;
  // Debug hook (tests only; keep problems small): when set, [heads_q][total_q][total_k] FP32
  // that receives, for every visible (query, key) pair, the real value of the backward's P̂:
  // e4m3_decode(P̂_ij) * 2^(M_i - 8) with the saved M_i (exact in FP32). A forward writing
  // e4m3_decode(P̂_ij) * 2^(M_running - 8) compares with it directly. Masked pairs: not written.
  float* debug_p_hat = nullptr;
};

size_t backward_scratch_bytes(const PackedShape& shape, bool deterministic);
// The FP32 dQ buffer inside `scratch` (dq_buffer.h: [heads_q][total_q][backward_dq_row_floats]),
// for a pass that zeroes it before launch_backward.
float* backward_dq_buffer(void* scratch);
int backward_dq_row_floats(int head_dim);
bool backward_supports_head_dim(int head_dim);
// Why the backward cannot launch `shape` (nullptr: it can): its launch-order entries
// (document * key tiles per document + tile) and its grid (key tile slots x KV heads CTAs) are
// 32-bit.
const char* backward_launch_limit(const PackedShape& shape);
cudaError_t launch_backward(const BackwardKernelArgs& args, cudaStream_t stream);

}  // namespace flamia
