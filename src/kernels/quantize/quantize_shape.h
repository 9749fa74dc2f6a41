// Job skeletons of the quantize pass shared by the forward and backward builders: the query-
// side and key-side tensors of a packed problem, and the LSE-shift extra.
#pragma once

#include "common/layout.h"
#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_launch.h"

namespace flamia::quantize {

inline bool shape_valid(const PackedShape& shape) {
  return quantize_supports_head_dim(shape.head_dim) && shape.heads_q > 0 && shape.heads_kv > 0 &&
         shape.heads_q % shape.heads_kv == 0 && shape.total_q >= 0 && shape.total_k >= 0 &&
         shape.batch >= 0;
}

inline TensorJob query_job(const PackedShape& shape, const TensorSource& x,
                           const int32_t* device_status) {
  TensorJob job;
  job.x = x;
  job.cu_seqlens = shape.cu_seqlens_q;
  job.batch = shape.batch;
  job.tokens = shape.total_q;
  job.heads = shape.heads_q;
  job.device_status = device_status;
  return job;
}

inline TensorJob key_job(const PackedShape& shape, const TensorSource& x,
                         const int32_t* device_status) {
  TensorJob job;
  job.x = x;
  job.cu_seqlens = shape.cu_seqlens_k;
  job.batch = shape.batch;
  job.tokens = shape.total_k;
  job.heads = shape.heads_kv;
  job.device_status = device_status;
  return job;
}

inline LseShiftSpec lse_shift_spec(const PackedShape& shape, float* out, KeySmoothing smoothing,
                                   const float* vector, const TensorSource& keys,
                                   float softmax_scale) {
  LseShiftSpec spec;
  spec.out = out;
  spec.source = smoothing;
  spec.keys = keys;
  spec.cu_seqlens_k = shape.cu_seqlens_k;
  spec.vector = vector;
  spec.kv_group = shape.group_size();
  spec.softmax_scale = softmax_scale;
  return spec;
}

}  // namespace flamia::quantize
