// launch_backward: BackwardKernelArgs -> kernel parameters, scratch carving, and the launch
// sequence on the caller's stream (no host synchronisation, graph-capturable):
//   1. zero the FP32 dQ buffer (unless the quantize pass did: dq_buffer_zeroed) and the
//      deterministic semaphores; plan the CTA launch order;
//      FP8: the per-query factors (row_factors.h),
//   2. the backward kernel (dK, dV written; dQ partials accumulated),
//   3. the dQ post-pass (FP32 -> BF16 into the strided output).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/fp8_numerics.h"
#include "common/layout.h"
#include "kernels/backward/backward.h"
#include "kernels/backward/backward_config.h"
#include "kernels/backward/backward_kernel_launch.h"
#include "kernels/backward/backward_params.h"
#include "kernels/backward/backward_schedule.h"
#include "kernels/backward/dq_accumulate.cuh"
#include "kernels/backward/dq_buffer.h"
#include "kernels/backward/key_tiles.h"
#include "kernels/backward/row_factors.h"
#include "kernels/hopper/tensor_map.h"

namespace flamia {
namespace {

constexpr int kConvertThreads = 256;
constexpr int kConvertMaxBlocks = 4096;

size_t dq_accum_bytes(const PackedShape& s) {
  return backward::dq_buffer_bytes(s.heads_q, s.total_q, s.head_dim);
}
size_t dq_semaphore_bytes(const PackedShape& s) {
  return size_t(s.heads_q) * s.total_q * sizeof(int32_t);
}

int key_tiles_per_doc(const PackedShape& s) {
  return backward::key_tiles_per_document(s.max_seqlen_k);
}

// CTAs per KV head: a bound on the key tiles with keys (key_tiles.h).
int key_tile_slots(const PackedShape& s) {
  return backward::key_tiles_bound(s.batch, s.total_k, key_tiles_per_doc(s));
}

}  // namespace

const char* backward_launch_limit(const PackedShape& s) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  if (int64_t(s.batch) * key_tiles_per_doc(s) > kInt32Max) {
    return "batch x key tiles per document (max_seqlen_k / 128) must stay below 2^31, the "
           "range of the backward's launch-order entries";
  }
  if (int64_t(key_tile_slots(s)) * s.heads_kv > kInt32Max) {
    return "its key tiles x heads_kv must stay below 2^31 CTAs";
  }
  return nullptr;
}

namespace {

// Whether runs of short documents share CTAs (packed_runs.h): the FP8 paths only, whose
// per-query factors come from the pre-pass (row_factors.cu, which writes the packed indices).
bool packs_documents(const BackwardKernelArgs& a) {
  return a.precision != BackwardPrecision::kFp8Bf16Grad;
}

backward::BackwardParams make_params(const BackwardKernelArgs& a, float* dq_accum,
                                     int32_t* semaphores, const int32_t* tile_order) {
  const PackedShape& s = a.shape;
  backward::BackwardParams p{};
  p.cu_seqlens_q = s.cu_seqlens_q;
  p.cu_seqlens_k = s.cu_seqlens_k;
  p.batch = s.batch;
  p.total_q = s.total_q;
  p.total_k = s.total_k;
  p.padded_q = int(padded_tokens(s.total_q));
  p.padded_k = int(padded_tokens(s.total_k));
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.group_size = s.group_size();
  p.key_tiles_per_doc = key_tiles_per_doc(s);
  p.key_tile_slots = key_tile_slots(s);
  p.tile_order = tile_order;
  p.causal = s.causal ? 1 : 0;
  p.sliding_window = s.causal ? s.sliding_window : 0;
  p.deterministic = a.deterministic ? 1 : 0;
  p.pack_documents = packs_documents(a) ? 1 : 0;
  p.softmax_scale = a.softmax_scale;
  p.scale_log2 = a.softmax_scale * kLog2e;  // the forward's expression: the same FP32 value
  p.q = a.fwd.q.values;
  p.q_exp = a.fwd.q.exponents;
  p.k = a.fwd.k.values;
  p.k_exp = a.fwd.k.exponents;
  p.v = a.bwd.v.values;
  p.v_exp = a.bwd.v.exponents != nullptr ? a.bwd.v.exponents : a.fwd.v_t.exponents;
  p.d_o = a.bwd.d_o.values;
  p.d_o_exp = a.bwd.d_o.exponents;
  p.q_t = a.bwd.q_t.values;
  p.k_centered_t = a.bwd.k_centered_t.values;
  p.k_centered_exp = a.bwd.k_centered_t.exponents;
  p.d_o_scaled_t = a.bwd.d_o_scaled_t.values;
  p.d_o_scaled_exp = a.bwd.d_o_scaled_t.exponents;
  p.delta = a.bwd.delta;
  p.softmax_stats = a.softmax_stats;
  p.static_key_exp = a.static_exponents.key;
  p.static_value_exp = a.static_exponents.value;
  p.q16 = a.q;
  p.k16 = a.k;
  p.v16 = a.v;
  p.d_o16 = a.d_o;
  p.dk = a.dk;
  p.dv = a.dv;
  p.dq_accum = dq_accum;
  p.dq_semaphore = semaphores;
  p.device_status = a.device_status;
  p.debug_p_hat = a.debug_p_hat;
  return p;
}

// The FP8 path's TMA maps of the per-step query tiles and query factors (BackwardParams). Not
// made when there is no query (a map needs non-empty dimensions; no step runs then).
cudaError_t make_query_maps(const PackedShape& s, const float* row_factors,
                            backward::BackwardParams* p) {
  if (s.total_q == 0) return cudaSuccess;
  const char* what = nullptr;
  const uint64_t d = uint64_t(s.head_dim);
  hopper::TensorMapSpec rows;  // [total_q][Hq][D]
  rows.rank = 3;
  rows.dims[0] = d;
  rows.dims[1] = uint64_t(s.heads_q);
  rows.dims[2] = uint64_t(s.total_q);
  rows.strides_bytes[0] = d;
  rows.strides_bytes[1] = uint64_t(s.heads_q) * d;
  rows.box[0] = uint32_t(d);
  rows.box[1] = 1;
  rows.box[2] = backward::kBlockM;
  rows.swizzle = hopper::swizzle_for_row_bytes(s.head_dim);
  hopper::TensorMapSpec token_major;  // [Hq * D][padded_q]; the padding holds zeros
  token_major.rank = 2;
  token_major.dims[0] = uint64_t(p->padded_q);
  token_major.dims[1] = uint64_t(s.heads_q) * d;
  token_major.strides_bytes[0] = uint64_t(p->padded_q);
  token_major.box[0] = backward::kBlockM;
  token_major.box[1] = uint32_t(d);
  token_major.swizzle = hopper::swizzle_for_row_bytes(backward::kBlockM);
  hopper::TensorMapSpec factors;  // FP32 [Hq * kRowFactorFields][padded_q], rows past total_q 0
  factors.element = hopper::TmaElement::kFloat32;
  factors.rank = 2;
  factors.dims[0] = uint64_t(s.total_q);
  factors.dims[1] = uint64_t(s.heads_q) * backward::kRowFactorFields;
  factors.strides_bytes[0] = uint64_t(p->padded_q) * sizeof(float);
  factors.box[0] = backward::kBlockM;
  factors.box[1] = backward::kRowFactorFields;
  factors.swizzle = hopper::TmaSwizzle::kNone;
  auto make = [&](hopper::TensorMapSpec spec, const void* base, CUtensorMap* map) {
    spec.base = base;
    return hopper::make_tensor_map(spec, map, &what);
  };
  cudaError_t error = make(rows, p->q, &p->q_map);
  if (error == cudaSuccess) error = make(rows, p->d_o, &p->d_o_map);
  if (error == cudaSuccess) error = make(token_major, p->q_t, &p->q_t_map);
  if (error == cudaSuccess) error = make(token_major, p->d_o_scaled_t, &p->d_o_scaled_t_map);
  if (error == cudaSuccess) error = make(factors, row_factors, &p->row_factors_map);
  return error;
}

template <int kHeadDim>
cudaError_t launch_for_head_dim(const BackwardKernelArgs& a, const backward::BackwardParams& p,
                                cudaStream_t stream) {
  const PackedShape& s = a.shape;
  const bool bf16_grad = a.precision == BackwardPrecision::kFp8Bf16Grad;
  if (p.key_tile_slots > 0 && s.heads_kv > 0) {
    const dim3 grid(unsigned(p.key_tile_slots) * unsigned(s.heads_kv));
    const cudaError_t error =
        bf16_grad ? backward::launch_backward_kernel<kHeadDim, true>(p, grid, stream)
                  : backward::launch_backward_kernel<kHeadDim, false>(p, grid, stream);
    if (error != cudaSuccess) return error;
  }
  const int64_t steps =
      int64_t(s.total_q) * s.heads_q * (kHeadDim / backward::kConvertValuesPerStep);
  if (steps == 0) return cudaSuccess;
  const int blocks =
      int(std::min<int64_t>((steps + kConvertThreads - 1) / kConvertThreads, kConvertMaxBlocks));
  return hopper::launch_kernel(backward::convert_dq_kernel<kHeadDim>, dim3(blocks),
                               dim3(kConvertThreads), 0, stream, hopper::Launch::kEarly, p.dq_accum,
                               a.dq, s.total_q, s.heads_q, a.device_status);
}

}  // namespace

size_t backward_scratch_bytes(const PackedShape& shape, bool deterministic) {
  size_t bytes = align_up(dq_accum_bytes(shape));
  if (deterministic) bytes += align_up(dq_semaphore_bytes(shape));
  bytes += align_up(backward::tile_order_bytes(key_tile_slots(shape)));
  bytes += align_up(backward::row_factors_bytes(shape.heads_q, int(padded_tokens(shape.total_q))));
  return bytes;
}

float* backward_dq_buffer(void* scratch) {
  return static_cast<float*>(scratch);  // the first buffer carved in launch_backward
}

int backward_dq_row_floats(int head_dim) {
  return backward::dq_row_floats(head_dim);
}

bool backward_supports_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

cudaError_t launch_backward(const BackwardKernelArgs& args, cudaStream_t stream) {
  const PackedShape& s = args.shape;
  if (!backward_supports_head_dim(s.head_dim) || s.heads_kv <= 0 || s.heads_q % s.heads_kv != 0 ||
      s.total_q < 0 || s.total_k < 0 ||
      (args.scratch == nullptr && backward_scratch_bytes(s, args.deterministic) > 0))
    return cudaErrorInvalidValue;
  WorkspaceCarver carver(args.scratch);
  float* dq_accum = carver.take<float>(dq_accum_bytes(s) / sizeof(float));
  // A caller that zeroed the buffer found it with backward_dq_buffer (dq_buffer_zeroed).
  if (dq_accum != backward_dq_buffer(args.scratch)) return cudaErrorInvalidValue;
  int32_t* semaphores =
      args.deterministic ? carver.take<int32_t>(size_t(s.heads_q) * s.total_q) : nullptr;
  int32_t* tile_order = carver.take<int32_t>(size_t(key_tile_slots(s)));
  float* row_factors = carver.take<float>(
      backward::row_factors_bytes(s.heads_q, int(padded_tokens(s.total_q))) / sizeof(float));

  cudaError_t error = cudaSuccess;
  if (!args.dq_buffer_zeroed) error = cudaMemsetAsync(dq_accum, 0, dq_accum_bytes(s), stream);
  if (error == cudaSuccess && semaphores != nullptr)
    error = cudaMemsetAsync(semaphores, 0, dq_semaphore_bytes(s), stream);
  // Early only when no memset above came between it and the quantize pass.
  const bool schedule_early =
      args.schedule_after_quantize_pass && args.dq_buffer_zeroed && semaphores == nullptr;
  if (error == cudaSuccess && key_tile_slots(s) > 0)
    error = backward::launch_backward_schedule(
        s, key_tiles_per_doc(s), key_tile_slots(s), packs_documents(args), args.device_status,
        tile_order, schedule_early ? hopper::Launch::kEarly : hopper::Launch::kInOrder, stream);
  if (error != cudaSuccess) return error;

  backward::BackwardParams p = make_params(args, dq_accum, semaphores, tile_order);
  if (args.precision != BackwardPrecision::kFp8Bf16Grad) {
    error = make_query_maps(s, row_factors, &p);
    if (error == cudaSuccess) error = backward::launch_row_factors(p, row_factors, stream);
    if (error != cudaSuccess) return error;
  }
  return s.head_dim == 64 ? launch_for_head_dim<64>(args, p, stream)
                          : launch_for_head_dim<128>(args, p, stream);
}

}  // namespace flamia
