// Host side of the forward: tensor maps, the plan, and the launch for each head dim.
#include "kernels/forward/forward.h"
#include "kernels/forward/forward_kernel.cuh"
#include "kernels/common/timeline.cuh"
#include "kernels/hopper/tensor_map.h"

namespace flamia {
namespace {

using forward::ForwardParams;
using forward::ForwardTile;

template <int kHeadDim, bool kStaticScales>
cudaError_t make_maps(const ForwardKernelArgs& args, ForwardParams* params) {
  using Tile = ForwardTile<kHeadDim, kStaticScales>;  // Q's box is the tile's query rows
  const PackedShape& s = args.shape;
  const char* what = nullptr;
  hopper::TensorMapSpec q;
  q.base = args.in.q.values;
  q.rank = 3;
  q.dims[0] = kHeadDim;
  q.dims[1] = s.heads_q;
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
  k.base = args.in.k.values;
  k.dims[1] = s.heads_kv;
  k.dims[2] = s.total_k;
  k.strides_bytes[1] = uint64_t(s.heads_kv) * kHeadDim;
  k.box[2] = Tile::kBlockN;
  err = hopper::make_tensor_map(k, &params->k_map, &what);
  if (err != cudaSuccess) return err;

  hopper::TensorMapSpec vt;
  vt.base = args.in.v_t.values;
  vt.rank = 2;
  vt.dims[0] = uint64_t(padded_tokens(s.total_k));
  vt.dims[1] = uint64_t(s.heads_kv) * kHeadDim;
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

int multiprocessor_count() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 132;
  return count;
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
cudaError_t launch_tile(const ForwardKernelArgs& args, ForwardParams params, cudaStream_t stream) {
  using Tile = ForwardTile<kHeadDim, kStaticScales>;
  const PackedShape& s = args.shape;
  const bool fused = args.fused.enabled;
  cudaError_t err = fused ? cudaSuccess : make_maps<kHeadDim, kStaticScales>(args, &params);
  if (err != cudaSuccess) return err;
  err = forward::launch_schedule_plan(s, Tile::kBlockM, Tile::kBlockN, args.device_status,
                                      args.scheduler_workspace, stream);
  if (err != cudaSuccess) return err;
  constexpr size_t kShared = forward::forward_shared_bytes<kHeadDim, kStaticScales>();
  const bool windowed = params.sliding_window > 0;  // (the fused path has no window: validated)
  auto kernel = kernel_for<kHeadDim, kStaticScales>(args.debug_p_hat != nullptr, windowed);
  if constexpr (kHeadDim == 128 && !kStaticScales) {
    if (fused) kernel = forward::forward_kernel<kHeadDim, false, true, false>;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kShared));
  if (err != cudaSuccess) return err;
  const int64_t max_items = forward::max_work_items(s, Tile::kBlockM);
  const int grid = int(max_items < multiprocessor_count() ? max_items : multiprocessor_count());
  kernel<<<grid, Tile::kThreads, kShared, stream>>>(params);
  return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t launch_for_head_dim(const ForwardKernelArgs& args, cudaStream_t stream) {
  const PackedShape& s = args.shape;
  ForwardParams params{};
  const bool fused = args.fused.enabled;
  if (fused && (args.debug_p_hat || !forward_supports_fused_quantize(kHeadDim)))
    return cudaErrorInvalidValue;  // no such instantiation
  const bool static_scales = args.static_exponents.enabled();
  if (static_scales && (fused || args.static_exponents.value == nullptr))
    return cudaErrorInvalidValue;  // no such instantiation (validated: static is not fused)
  params.fused_q = args.fused.q;
  params.fused_k = args.fused.k;
  params.fused_v = args.fused.v;
  params.fused_block32 = args.fused.scale_mode == ScaleMode::kBlock32 ? 1 : 0;
  params.q_exp = args.in.q.exponents;
  params.k_exp = args.in.k.exponents;
  params.v_exp = args.in.v_t.exponents;
  params.lse_shift = args.in.lse_shift;
  params.static_key_exp = args.static_exponents.key;
  params.static_value_exp = args.static_exponents.value;
  params.cu_seqlens_q = s.cu_seqlens_q;
  params.cu_seqlens_k = s.cu_seqlens_k;
  params.total_q = s.total_q;
  params.total_k = s.total_k;
  params.heads_q = s.heads_q;
  params.group_size = s.group_size();
  params.scale_log2 = args.softmax_scale * kLog2e;
  params.causal = s.causal ? 1 : 0;
  params.sliding_window = s.causal ? s.sliding_window : 0;
  params.o = static_cast<__nv_bfloat16*>(args.o.data);
  params.o_token_stride = args.o.token_stride;
  params.o_head_stride = args.o.head_stride;
  params.lse = args.lse;
  params.softmax_stats = args.softmax_stats;
  params.device_status = args.device_status;
  params.schedule = forward::schedule_view(args.scheduler_workspace);
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
