// The backward's quantize pass: four jobs, each one read of its BF16 tensor(s).
//   Q  -> Q̂ᵀ token-major permuted (+ Q̂ row-major and the LSE shift, when fwd_out asks),
//   K  -> K̂cᵀ token-major natural from k - k_first (+ K̂ row-major from k - m),
//   V  -> V̂ row-major (+ V̂ᵀ token-major permuted),
//   dO -> dÔ row-major (scale_mode blocks) and dO''ᵀ = (dO fl(1/l))ᵀ token-major permuted
//         (64-query tile-aligned blocks), plus delta from dÔ (fp8-bf16grad: dO) and O; and
//         zeroes its tokens' rows of the backward's FP32 dQ buffer when given.
#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_launch.h"
#include "kernels/quantize/quantize_shape.h"

namespace flamia {
namespace {

// The second exponent output of a copy, unless it is the same array as the first.
int8_t* other_exponents(int8_t* first, int8_t* second) {
  return second == first ? nullptr : second;
}

}  // namespace

cudaError_t launch_quantize_backward(const QuantizeBackwardArgs& args, cudaStream_t stream) {
  using namespace quantize;
  const PackedShape& shape = args.shape;
  if (!shape_valid(shape) || !args.heads.fits(shape)) return cudaErrorInvalidValue;
  const BlockKind blocks = blocks_of(args.scale_mode);
  const BackwardOperands& out = args.out;
  const ForwardOperands& fwd = args.fwd_out;

  // Q̂ᵀ holds the same bytes and exponents as Q̂.
  TensorJob q = query_job(shape, to_source(args.q), args.device_status, kDeviceStatusInfiniteQuery);
  CopySpec q_hat;
  q_hat.blocks = blocks;
  q_hat.order = TokenOrder::kPermuted;
  q_hat.token_major = out.q_t.values;
  q_hat.row_major = fwd.q.values;
  q_hat.exponents[0] = out.q_t.exponents;
  q_hat.exponents[1] = other_exponents(out.q_t.exponents, fwd.q.exponents);
  add_copy(q, q_hat);
  q.lse_shift = lse_shift_spec(shape, fwd.lse_shift, args.key_smoothing, args.key_smoothing_vector,
                               to_source(args.k), args.softmax_scale);

  // K̂cᵀ from k - k_first; K̂ from k - m shares it when m is the first key.
  TensorJob k = key_job(shape, to_source(args.k), args.device_status, kDeviceStatusInfiniteKey);
  CopySpec k_centered;
  k_centered.transform = Transform::kSubtractFirstKey;
  k_centered.blocks = blocks;
  k_centered.order = TokenOrder::kNatural;
  k_centered.token_major = out.k_centered_t.values;
  k_centered.exponents[0] = out.k_centered_t.exponents;
  CopySpec k_hat;
  k_hat.transform = transform_of(args.key_smoothing);
  k_hat.blocks = blocks;
  k_hat.row_major = fwd.k.values;
  k_hat.exponents[0] = fwd.k.exponents;
  k_hat.static_exponents = args.static_exponents.key;
  k_hat.amax_out = kv_amax_row(args.kv_amax, shape, 0);
  // K̂ shares K̂c's bytes when both come from k - k_first with the same exponents (not kStatic)
  if (k_hat.transform == Transform::kSubtractFirstKey && k_hat.static_exponents == nullptr) {
    k_centered.row_major = k_hat.row_major;
    k_centered.exponents[1] = other_exponents(k_centered.exponents[0], k_hat.exponents[0]);
    k_centered.amax_out = k_hat.amax_out;  // the same transform
    add_copy(k, k_centered);
  } else {
    add_copy(k, k_centered);
    add_copy(k, k_hat);
  }
  k.shift_vector = args.key_smoothing_vector;

  // V̂ and V̂ᵀ: same bytes, same exponents.
  TensorJob v = key_job(shape, to_source(args.v), args.device_status, kDeviceStatusInfiniteValue);
  CopySpec v_hat;
  v_hat.blocks = blocks;
  v_hat.order = TokenOrder::kPermuted;
  v_hat.row_major = out.v.values;
  v_hat.token_major = fwd.v_t.values;
  v_hat.exponents[0] = out.v.exponents;
  v_hat.exponents[1] = other_exponents(out.v.exponents, fwd.v_t.exponents);
  v_hat.static_exponents = args.static_exponents.value;
  v_hat.amax_out = kv_amax_row(args.kv_amax, shape, 1);
  add_copy(v, v_hat);

  // dÔ first: delta reads copy 0's codes.
  TensorJob d_o = query_job(shape, to_source(args.d_o), args.device_status,
                            kDeviceStatusInfiniteOutputGradient);
  CopySpec d_o_hat;
  d_o_hat.blocks = blocks;
  d_o_hat.row_major = out.d_o.values;
  d_o_hat.exponents[0] = out.d_o.exponents;
  add_copy(d_o, d_o_hat, /*keep=*/out.delta != nullptr);
  CopySpec d_o_scaled;
  d_o_scaled.transform = Transform::kTimesInverseL;
  d_o_scaled.blocks = BlockKind::kTile64;
  d_o_scaled.order = TokenOrder::kPermuted;
  d_o_scaled.token_major = out.d_o_scaled_t.values;
  d_o_scaled.exponents[0] = out.d_o_scaled_t.exponents;
  add_copy(d_o, d_o_scaled);
  d_o.softmax_stats = args.softmax_stats;
  d_o.delta.out = out.delta;
  d_o.delta.o = to_source(args.o);
  d_o.delta.from_input = args.delta_from_bf16_d_o;
  d_o.zero_rows = {args.dq_buffer, args.dq_row_floats};

  restrict_to_range(q, args.heads, shape, /*query_side=*/true);
  restrict_to_range(k, args.heads, shape, /*query_side=*/false);
  restrict_to_range(v, args.heads, shape, /*query_side=*/false);
  restrict_to_range(d_o, args.heads, shape, /*query_side=*/true);
  TensorJob jobs[] = {q, k, v, d_o};
  return launch_tensor_jobs(jobs, sizeof(jobs) / sizeof(jobs[0]), shape.head_dim, stream,
                            args.general_kernel_only);
}

}  // namespace flamia
