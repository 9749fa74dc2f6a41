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

inline TensorJob query_job(const PackedShape& shape, const TensorSource& x, int32_t* device_status,
                           DeviceStatus infinite_status) {
  TensorJob job;
  job.x = x;
  job.cu_seqlens = shape.cu_seqlens_q;
  job.batch = shape.batch;
  job.tokens = shape.total_q;
  job.heads = shape.heads_q;
  job.layout_heads = shape.heads_q;
  job.device_status = device_status;
  job.infinite_status = infinite_status;
  return job;
}

inline TensorJob key_job(const PackedShape& shape, const TensorSource& x, int32_t* device_status,
                         DeviceStatus infinite_status) {
  TensorJob job;
  job.x = x;
  job.cu_seqlens = shape.cu_seqlens_k;
  job.batch = shape.batch;
  job.tokens = shape.total_k;
  job.heads = shape.heads_kv;
  job.layout_heads = shape.heads_kv;
  job.device_status = device_status;
  job.infinite_status = infinite_status;
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

// The job restricted to its heads [first, first + count): every per-head pointer moves to head
// `first`; the row-major copies keep the whole tensor's layout (layout_heads). `first` is a
// multiple of the LSE shift's KV group (a query job's range covers whole groups).
inline void restrict_to_heads(TensorJob& job, int first, int count, int head_dim) {
  const int64_t tokens = job.tokens;
  const int64_t head_values = int64_t(first) * head_dim;
  job.x.data = advance(job.x.data, first * job.x.head_stride);
  for (int n = 0; n < job.num_copies; ++n) {
    CopySpec& copy = job.copy[n];
    copy.row_major = advance(copy.row_major, head_values);
    copy.token_major = advance(copy.token_major, head_values * padded_tokens(job.tokens));
    for (int8_t*& exponents : copy.exponents) exponents = advance(exponents, first * tokens);
    copy.static_exponents = advance(copy.static_exponents, first);
    copy.amax_out = advance(copy.amax_out, first);
  }
  job.shift_vector = advance(job.shift_vector, head_values);
  job.softmax_stats = advance(job.softmax_stats, first * tokens * kSoftmaxStatsPerRow);
  LseShiftSpec& lse = job.lse_shift;
  lse.out = advance(lse.out, first * tokens);
  const int first_kv = first / lse.kv_group;
  lse.keys.data = advance(lse.keys.data, first_kv * lse.keys.head_stride);
  lse.vector = advance(lse.vector, int64_t(first_kv) * head_dim);
  job.delta.out = advance(job.delta.out, first * tokens);
  job.delta.o.data = advance(job.delta.o.data, first * job.delta.o.head_stride);
  job.zero_rows.base = advance(job.zero_rows.base, first * tokens * job.zero_rows.row_floats);
  job.heads = count;
}

// The query-side (`query_side`) or key-side job restricted to the heads of `range`.
inline void restrict_to_range(TensorJob& job, const HeadRange& range, const PackedShape& shape,
                              bool query_side) {
  if (range.whole()) return;
  if (query_side)
    restrict_to_heads(job, range.q_begin(shape), range.q_heads(shape), shape.head_dim);
  else
    restrict_to_heads(job, range.kv_begin, range.kv_heads(shape), shape.head_dim);
}

// `amax` moved to K's (row 0) or V's (row 1) maxima of `shape`'s KV heads, or null.
inline float* kv_amax_row(float* amax, const PackedShape& shape, int row) {
  return advance(amax, int64_t(row) * shape.heads_kv);
}

}  // namespace flamia::quantize
