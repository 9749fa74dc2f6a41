// The FP8 backward's per-query factors (Fp8QueryFactors), computed once per (query head, token)
// before the backward kernel: [Hq][kRowFactorFields][padded_q] FP32 words, the kernel's TMA
// source (one box per step). Each value is what QueryFactorFetch::store computes for the row.
#include "kernels/backward/row_factors.h"

#include <algorithm>
#include <cstdint>

#include "common/fp8_numerics.h"
#include "common/sorted_search.h"
#include "common/views.h"
#include "kernels/backward/key_tiles.h"
#include "kernels/backward/packed_runs.h"
#include "kernels/backward/tile_factors.cuh"
#include "kernels/hopper/dependent_launch.cuh"

namespace flamia::backward {
namespace {

constexpr int kFactorThreads = 256;
constexpr int kMaxBlocks = 4096;

enum RowFactorField : int {
  kRowFactorField = 0,
  kOffsetField,
  kGradientFactorFields,  // Fp8QueryFactors::gradient_factor
  kVisibilityField = kGradientFactorFields + kGradientFactors,
  kValueBlockExpField,
};
static_assert(kValueBlockExpField + 1 == kRowFactorFields, "Fp8QueryFactors' fields");

// One thread per (query head, token) row at a time.
__global__ void row_factors_kernel(const __grid_constant__ BackwardParams p, float* out) {
  hopper::wait_for_prior_grids();  // launched early (launch_row_factors)
  if (p.device_status != nullptr && *p.device_status != kDeviceStatusOk) return;
  const int64_t rows = int64_t(p.heads_q) * p.total_q;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int head = int(r / p.total_q);
    const int token = int(r % p.total_q);
    // the document of the token: the last one whose first query is <= token
    const int doc =
        upper_bound_by([&](int i) { return p.cu_seqlens_q[i]; }, p.batch + 1, token) - 1;
    const DocumentSpan span{p.cu_seqlens_q[doc], p.cu_seqlens_q[doc + 1], 0, 0};
    const float2 stats = reinterpret_cast<const float2*>(p.softmax_stats)[r];
    RowFactorValues v =
        row_factor_values</*kBf16Grad=*/false>(p.scale_log2, p.q_exp[r], p.d_o_exp[r], stats);
    const int kv_head = head / p.group_size;
    fold_static_exponents(v, p, kv_head);
    // kStaticScales: D_i 2^-ev, the product score_gradient_half forms per element otherwise
    const float delta =
        p.static_value_exp != nullptr
            ? __fmul_rn(p.delta[r], exp2_int(-static_scale_exponent(p.static_value_exp[kv_head])))
            : p.delta[r];
    float* row = out + int64_t(head) * kRowFactorFields * p.padded_q + token;
    auto field = [&](int f) -> float& { return row[int64_t(f) * p.padded_q]; };
    field(kRowFactorField) = v.row_factor;
    field(kOffsetField) = v.offset;
    auto gradient = [&](GradientFactor g) -> float& { return field(kGradientFactorFields + g); };
    gradient(kGradientScale) = __fmul_rn(v.probability_scale, v.d_o_scale);  // (exact)
    gradient(kScaledDelta) = __fmul_rn(v.probability_scale, delta);
    const int visibility =
        p.pack_documents != 0 && document_packs(p.cu_seqlens_q, p.cu_seqlens_k, doc)
            ? packed_query_index(doc, token - span.q_start, p.causal != 0)
            : query_visibility_index(span, token, p.causal != 0);
    field(kVisibilityField) = __int_as_float(visibility);
    field(kValueBlockExpField) = __int_as_float(int(p.d_o_scaled_exp[r]));
  }
}

}  // namespace

size_t row_factors_bytes(int heads_q, int padded_q) {
  return size_t(heads_q) * kRowFactorFields * size_t(padded_q) * sizeof(float);
}

cudaError_t launch_row_factors(const BackwardParams& p, float* out, cudaStream_t stream) {
  const int64_t rows = int64_t(p.heads_q) * p.total_q;
  if (rows == 0) return cudaSuccess;
  const int blocks =
      int(std::min<int64_t>((rows + kFactorThreads - 1) / kFactorThreads, kMaxBlocks));
  return hopper::launch_kernel(row_factors_kernel, dim3(blocks), dim3(kFactorThreads), 0, stream,
                               hopper::Launch::kEarly, p, out);
}

}  // namespace flamia::backward
