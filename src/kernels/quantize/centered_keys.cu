// fp8-bf16grad's dQ operand: BF16 k - k_first(doc) (docs/numerics.md §5 step 10). The softmax
// gradient's rows sum to zero, so dQ = Σ_j dS_ij k_j = Σ_j dS_ij (k_j - k_first) in exact
// arithmetic; against the centred keys, what BF16 rounding leaves of that row sum no longer
// multiplies the keys' common component.
#include <cuda_bf16.h>

#include "common/sorted_search.h"
#include "kernels/quantize/quantize.h"

namespace flamia {
namespace {

constexpr int kCenterThreads = 256;

// One CTA per key token: its document's first key by a binary search of cu_seqlens_k, then
// every (head, channel) of the token.
__global__ void __launch_bounds__(kCenterThreads)
    center_keys_kernel(const int32_t* __restrict__ cu_seqlens_k, int batch, Bf16View k, int heads,
                       int head_dim, __nv_bfloat16* __restrict__ out,
                       const int32_t* device_status) {
  if (device_status != nullptr && *device_status != kDeviceStatusOk) return;
  const int token = blockIdx.x;
  // document b holds token t when cu[b] <= t < cu[b + 1]: b = (entries <= t) - 1
  const int entries_le =
      upper_bound_by([&](int i) { return __ldg(cu_seqlens_k + i); }, batch + 1, token);
  const int first = __ldg(cu_seqlens_k + entries_le - 1);
  const auto* in = static_cast<const __nv_bfloat16*>(k.data);
  for (int e = threadIdx.x; e < heads * head_dim; e += blockDim.x) {
    const int head = e / head_dim, channel = e % head_dim;
    const int64_t offset = int64_t(head) * k.head_stride + channel;
    const float key = __bfloat162float(in[int64_t(token) * k.token_stride + offset]);
    const float first_key = __bfloat162float(in[int64_t(first) * k.token_stride + offset]);
    out[int64_t(token) * heads * head_dim + e] = __float2bfloat16_rn(__fsub_rn(key, first_key));
  }
}

}  // namespace

cudaError_t launch_center_keys_bf16(const PackedShape& shape, Bf16View k, void* out,
                                    const int32_t* device_status, cudaStream_t stream) {
  if (shape.total_k == 0) return cudaSuccess;
  center_keys_kernel<<<shape.total_k, kCenterThreads, 0, stream>>>(
      shape.cu_seqlens_k, shape.batch, k, shape.heads_kv, shape.head_dim,
      static_cast<__nv_bfloat16*>(out), device_status);
  return cudaGetLastError();
}

}  // namespace flamia
