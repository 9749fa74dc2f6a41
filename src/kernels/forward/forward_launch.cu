// Host side of the forward: tensor maps, the plan, and the launch for each head dim.
#include <algorithm>

#include "common/device_info.h"
#include "kernels/forward/forward.h"
#include "kernels/forward/forward_kernel.cuh"
#include "kernels/common/timeline.cuh"
#include "kernels/hopper/dependent_launch.cuh"
#include "kernels/hopper/tensor_map.h"

namespace flamia {
namespace {

using forward::ForwardParams;
using forward::ForwardTile;

// The problem as the kernel sees it for args.heads: the range's head counts (its plan's items,
// its grid). The tensors' layouts stay those of args.shape.
PackedShape range_shape(const ForwardKernelArgs& args) {
  PackedShape s = args.shape;
  s.heads_q = args.heads.q_heads(args.shape);
  s.heads_kv = args.heads.kv_heads(args.shape);
  return s;
}

// The tensor maps of Q̂, K̂ and V̂ᵀ over the heads of args.heads (their strides: every head's).
template <int kHeadDim, bool kStaticScales>
cudaError_t make_maps(const ForwardKernelArgs& args, ForwardParams* params) {
  using Tile = ForwardTile<kHeadDim, kStaticScales>;  // Q's box is the tile's query rows
  const PackedShape& s = args.shape;
  const int q_begin = args.heads.q_begin(s), kv_begin = args.heads.kv_begin;
  const char* what = nullptr;
  hopper::TensorMapSpec q;
  q.base = args.in.q.values + size_t(q_begin) * kHeadDim;
  q.rank = 3;
  q.dims[0] = kHeadDim;
  q.dims[1] = args.heads.q_heads(s);
  q.dims[2] = s.total_q;
  q.strides_bytes[0] = kHeadDim;
  q.strides_bytes[1] = uint64_t(s.heads_q) * kHeadDim;
  q.box[0] = kHeadDim;
  q.box[1] = 1;
  q.box[2] = Tile::kBlockM;
  q.swizzle = hopper::swizzle_for_row_bytes(kHeadDim);
  cudaError_t err = hopper::make_tensor_map(q, &params->q_map, &what);
  if (err != cudaSuccess || s.total_k == 0) return err;  // no keys: K/V maps never used

  hopper::TensorMapSpec k = q;
  k.base = args.in.k.values + size_t(kv_begin) * kHeadDim;
  k.dims[1] = args.heads.kv_heads(s);
  k.dims[2] = s.total_k;
  k.strides_bytes[1] = uint64_t(s.heads_kv) * kHeadDim;
  k.box[2] = Tile::kBlockN;
  err = hopper::make_tensor_map(k, &params->k_map, &what);
  if (err != cudaSuccess) return err;

  hopper::TensorMapSpec vt;
  vt.base = args.in.v_t.values + size_t(kv_begin) * kHeadDim * padded_tokens(s.total_k);
  vt.rank = 2;
  vt.dims[0] = uint64_t(padded_tokens(s.total_k));
  vt.dims[1] = uint64_t(args.heads.kv_heads(s)) * kHeadDim;
  vt.strides_bytes[0] = uint64_t(padded_tokens(s.total_k));
  vt.box[0] = Tile::kVtSubtileKeys;
  vt.box[1] = kHeadDim;
  vt.swizzle = hopper::swizzle_for_row_bytes(Tile::kVtSubtileKeys);
  err = hopper::make_tensor_map(vt, &params->vt_map, &what);
  if (err != cudaSuccess) return err;
  vt.box[0] = Tile::kVtTailKeys;
  vt.swizzle = hopper::swizzle_for_row_bytes(Tile::kVtTailKeys);
  return hopper::make_tensor_map(vt, &params->vt_tail_map, &what);
}

// The persistent grid: one CTA per SM (an H200's count if the device cannot be read; the launch
// then fails on its own).
int persistent_ctas() {
  constexpr int kH200Multiprocessors = 132;
  const int count = current_multiprocessors();
  return count > 0 ? count : kH200Multiprocessors;
}

// The unfused instantiations: debug P̂ or not, a sliding window or not.
template <int kHeadDim, bool kStaticScales>
auto kernel_for(bool debug_p_hat, bool windowed) {
  using forward::forward_kernel;
  return debug_p_hat ? (windowed ? forward_kernel<kHeadDim, true, false, true, kStaticScales>
                                 : forward_kernel<kHeadDim, true, false, false, kStaticScales>)
                     : (windowed ? forward_kernel<kHeadDim, false, false, true, kStaticScales>
                                 : forward_kernel<kHeadDim, false, false, false, kStaticScales>);
}

// The kernel of the tile configuration (scale mode kStatic's or the others'): its tensor maps,
// the plan of its query tiles, and the launch. `params` holds everything else.
template <int kHeadDim, bool kStaticScales>
cudaError_t launch_plan(const ForwardKernelArgs& args, cudaStream_t stream) {
  using Tile = ForwardTile<kHeadDim, kStaticScales>;
  return forward::launch_schedule_plan(
      range_shape(args), Tile::kBlockM, Tile::kBlockN, args.device_status, args.scheduler_workspace,
      args.plan_after_quantize_pass ? hopper::Launch::kEarly : hopper::Launch::kInOrder, stream);
}

template <int kHeadDim, bool kStaticScales>
cudaError_t launch_tile(const ForwardKernelArgs& args, ForwardParams params, cudaStream_t stream) {
  using Tile = ForwardTile<kHeadDim, kStaticScales>;
  const PackedShape s = range_shape(args);
  const bool fused = args.fused.enabled;
  cudaError_t err = fused ? cudaSuccess : make_maps<kHeadDim, kStaticScales>(args, &params);
  if (err != cudaSuccess) return err;
  if (!args.plan_ready) {
    err = launch_plan<kHeadDim, kStaticScales>(args, stream);
    if (err != cudaSuccess) return err;
  }
  constexpr size_t kShared = forward::forward_shared_bytes<kHeadDim, kStaticScales>();
  const bool windowed = params.sliding_window > 0;  // (the fused path has no window: validated)
  auto kernel = kernel_for<kHeadDim, kStaticScales>(args.debug_p_hat != nullptr, windowed);
  if constexpr (kHeadDim == 128 && !kStaticScales) {
    if (fused) kernel = forward::forward_kernel<kHeadDim, false, true, false>;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kShared));
  if (err != cudaSuccess) return err;
  const int64_t max_items = forward::max_work_items(s, Tile::kBlockM);
  const int ctas =
      args.max_ctas > 0 ? std::min(args.max_ctas, persistent_ctas()) : persistent_ctas();
  const int grid = int(std::min<int64_t>(max_items, ctas));
  // Right after its plan on the stream, the kernel starts early: it waits for the plan (and the
  // plan for the quantize pass) before it reads anything (forward_kernel).
  return hopper::launch_kernel(kernel, dim3(grid), dim3(Tile::kThreads), kShared, stream,
                               args.plan_ready ? hopper::Launch::kInOrder : hopper::Launch::kEarly,
                               params);
}

// A head range of the tensors (not of the fused or debug instantiations' inputs).
bool range_valid(const ForwardKernelArgs& args) {
  return args.heads.whole() ||
         (!args.fused.enabled && args.debug_p_hat == nullptr && args.heads.fits(args.shape));
}

template <int kHeadDim>
cudaError_t launch_for_head_dim(const ForwardKernelArgs& args, cudaStream_t stream) {
  const PackedShape& s = args.shape;
  ForwardParams params{};
  const bool fused = args.fused.enabled;
  if (fused && (args.debug_p_hat || !forward_supports_fused_quantize(kHeadDim)))
    return cudaErrorInvalidValue;  // no such instantiation
  if (!range_valid(args)) return cudaErrorInvalidValue;
  // Per-head arrays start at the range's first head; [heads][total] arrays keep their strides.
  const int64_t q_rows = int64_t(args.heads.q_begin(s)) * s.total_q;
  const int64_t kv_rows = int64_t(args.heads.kv_begin) * s.total_k;
  const bool static_scales = args.static_exponents.enabled();
  if (static_scales && (fused || args.static_exponents.value == nullptr))
    return cudaErrorInvalidValue;  // no such instantiation (validated: static is not fused)
  params.fused_q = args.fused.q;
  params.fused_k = args.fused.k;
  params.fused_v = args.fused.v;
  params.fused_block32 = args.fused.scale_mode == ScaleMode::kBlock32 ? 1 : 0;
  params.q_exp = advance(args.in.q.exponents, q_rows);
  params.k_exp = advance(args.in.k.exponents, kv_rows);
  params.v_exp = advance(args.in.v_t.exponents, kv_rows);
  params.lse_shift = advance(args.in.lse_shift, q_rows);
  params.static_key_exp = advance(args.static_exponents.key, args.heads.kv_begin);
  params.static_value_exp = advance(args.static_exponents.value, args.heads.kv_begin);
  params.cu_seqlens_q = s.cu_seqlens_q;
  params.cu_seqlens_k = s.cu_seqlens_k;
  params.total_q = s.total_q;
  params.total_k = s.total_k;
  params.heads_q = args.heads.q_heads(s);
  params.group_size = s.group_size();
  params.scale_log2 = args.softmax_scale * kLog2e;
  params.causal = s.causal ? 1 : 0;
  params.sliding_window = s.causal ? s.sliding_window : 0;
  params.o = advance(static_cast<__nv_bfloat16*>(args.o.data),
                     int64_t(args.heads.q_begin(s)) * args.o.head_stride);
  params.o_token_stride = args.o.token_stride;
  params.o_head_stride = args.o.head_stride;
  params.lse = advance(args.lse, q_rows);
  params.softmax_stats = advance(args.softmax_stats, q_rows * kSoftmaxStatsPerRow);
  params.device_status = args.device_status;
  params.schedule = forward::schedule_view(args.scheduler_workspace);
  params.dynamic_items = forward::kDynamicItems<kHeadDim> && !args.plan_ready ? 1 : 0;
  params.debug_p_hat = args.debug_p_hat;
  return static_scales ? launch_tile<kHeadDim, true>(args, params, stream)
                       : launch_tile<kHeadDim, false>(args, params, stream);
}

}  // namespace

size_t forward_scheduler_workspace_bytes(const PackedShape& shape) {
  // the plan of the head dim's query tiles (an unsupported head dim fails at launch): sized for
  // the tile with the fewest rows (scale mode kStatic's has as many or more)
  static_assert(ForwardTile<128, true>::kBlockM >= ForwardTile<128>::kBlockM &&
                    ForwardTile<64, true>::kBlockM >= ForwardTile<64>::kBlockM,
                "the static tiles' plans fit the workspace");
  const int block_m = shape.head_dim == 64 ? ForwardTile<64>::kBlockM : ForwardTile<128>::kBlockM;
  return forward::schedule_workspace_bytes(shape, block_m);
}

bool forward_supports_fused_quantize(int head_dim) {
  return head_dim == 128;
}

bool forward_supports_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

cudaError_t launch_forward_plan(const ForwardKernelArgs& args, cudaStream_t stream) {
  if (args.shape.total_q == 0 || args.shape.batch == 0) return cudaSuccess;
  const bool static_scales = args.static_exponents.enabled();
  switch (args.shape.head_dim) {
    case 64:
      return static_scales ? launch_plan<64, true>(args, stream)
                           : launch_plan<64, false>(args, stream);
    case 128:
      return static_scales ? launch_plan<128, true>(args, stream)
                           : launch_plan<128, false>(args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_forward(const ForwardKernelArgs& args, cudaStream_t stream) {
  if (args.shape.total_q == 0 || args.shape.batch == 0) return cudaSuccess;
  switch (args.shape.head_dim) {
    case 64:
      return launch_for_head_dim<64>(args, stream);
    case 128:
      return launch_for_head_dim<128>(args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace flamia

#if FLAMIA_TIMELINE
namespace flamia::timeline {
FLAMIA_TIMELINE_ACCESSORS(forward)
}  // namespace flamia::timeline
#endif
