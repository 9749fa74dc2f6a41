// The forward's quantize pass: three jobs (Q, K, V), each one read of its BF16 tensor.
//   Q -> Q̂ row-major (+ the LSE shift of key smoothing),
//   K -> K̂ row-major from k - m,
//   V -> V̂ᵀ token-major, permuted.
#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_launch.h"
#include "kernels/quantize/quantize_shape.h"

namespace flamia {

cudaError_t launch_quantize_forward(const QuantizeForwardArgs& args, cudaStream_t stream) {
  using namespace quantize;
  const PackedShape& shape = args.shape;
  if (!shape_valid(shape) || !args.heads.fits(shape)) return cudaErrorInvalidValue;
  const BlockKind blocks = blocks_of(args.scale_mode);

  TensorJob q = query_job(shape, to_source(args.q), args.device_status, kDeviceStatusInfiniteQuery);
  CopySpec q_hat;
  q_hat.blocks = blocks;
  q_hat.row_major = args.out.q.values;
  q_hat.exponents[0] = args.out.q.exponents;
  add_copy(q, q_hat);
  q.lse_shift = lse_shift_spec(shape, args.out.lse_shift, args.key_smoothing,
                               args.key_smoothing_vector, to_source(args.k), args.softmax_scale);

  TensorJob k = key_job(shape, to_source(args.k), args.device_status, kDeviceStatusInfiniteKey);
  CopySpec k_hat;
  k_hat.transform = transform_of(args.key_smoothing);
  k_hat.blocks = blocks;
  k_hat.row_major = args.out.k.values;
  k_hat.exponents[0] = args.out.k.exponents;
  k_hat.static_exponents = args.static_exponents.key;
  k_hat.amax_out = kv_amax_row(args.kv_amax, shape, 0);
  add_copy(k, k_hat);
  k.shift_vector = args.key_smoothing_vector;

  TensorJob v = key_job(shape, to_source(args.v), args.device_status, kDeviceStatusInfiniteValue);
  CopySpec v_hat_t;
  v_hat_t.blocks = blocks;
  v_hat_t.order = TokenOrder::kPermuted;
  v_hat_t.token_major = args.out.v_t.values;
  v_hat_t.exponents[0] = args.out.v_t.exponents;
  v_hat_t.static_exponents = args.static_exponents.value;
  v_hat_t.amax_out = kv_amax_row(args.kv_amax, shape, 1);
  add_copy(v, v_hat_t);

  restrict_to_range(q, args.heads, shape, /*query_side=*/true);
  restrict_to_range(k, args.heads, shape, /*query_side=*/false);
  restrict_to_range(v, args.heads, shape, /*query_side=*/false);
  TensorJob jobs[] = {q, k, v};
  return launch_tensor_jobs(jobs, sizeof(jobs) / sizeof(jobs[0]), shape.head_dim, stream,
                            args.general_kernel_only);
}

}  // namespace flamia
