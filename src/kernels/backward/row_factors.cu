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
#include "kernels/backward/tile_factors.cuh"

namespace flamia::backward {
namespace {

constexpr int kFactorThreads = 256;
constexpr int kMaxBlocks = 4096;

enum RowFactorField : int {
  kRowFactorField = 0,
  kOffsetField,
  kProbabilityScaleField,
  kDoScaleField,
  kDeltaField,
  kVisibilityField,
  kValueBlockExpField,
};
static_assert(kValueBlockExpField + 1 == kRowFactorFields, "Fp8QueryFactors' fields");

struct RowFactorInputs {
  const int32_t* cu_seqlens_q;
  int batch;
  int total_q;
  int padded_q;
  int heads_q;
  bool causal;
  float scale_log2;
  const int8_t* q_exp;           // [Hq][total_q]
  const int8_t* d_o_exp;         // [Hq][total_q]
  const int8_t* d_o_scaled_exp;  // [Hq][total_q]
  const float* delta;            // [Hq][total_q]
  const float* softmax_stats;    // [Hq][total_q][2]
  const int32_t* device_status;
};

__global__ void row_factors_kernel(const RowFactorInputs in, float* out) {
  if (in.device_status != nullptr && *in.device_status != kDeviceStatusOk) return;
  const int64_t rows = int64_t(in.heads_q) * in.total_q;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int head = int(r / in.total_q);
    const int token = int(r % in.total_q);
    // the document of the token: the last one whose first query is <= token
    const int doc =
        upper_bound_by([&](int i) { return in.cu_seqlens_q[i]; }, in.batch + 1, token) - 1;
    const DocumentSpan span{in.cu_seqlens_q[doc], in.cu_seqlens_q[doc + 1], 0, 0};
    const float2 stats = reinterpret_cast<const float2*>(in.softmax_stats)[r];
    const RowFactorValues v =
        row_factor_values</*kBf16Grad=*/false>(in.scale_log2, in.q_exp[r], in.d_o_exp[r], stats);
    float* row = out + int64_t(head) * kRowFactorFields * in.padded_q + token;
    auto field = [&](int f) -> float& { return row[int64_t(f) * in.padded_q]; };
    field(kRowFactorField) = v.row_factor;
    field(kOffsetField) = v.offset;
    field(kProbabilityScaleField) = v.probability_scale;
    field(kDoScaleField) = v.d_o_scale;
    field(kDeltaField) = in.delta[r];
    field(kVisibilityField) = __int_as_float(query_visibility_index(span, token, in.causal));
    field(kValueBlockExpField) = __int_as_float(int(in.d_o_scaled_exp[r]));
  }
}

}  // namespace

size_t row_factors_bytes(int heads_q, int padded_q) {
  return size_t(heads_q) * kRowFactorFields * size_t(padded_q) * sizeof(float);
}

cudaError_t launch_row_factors(const BackwardParams& p, float* out, cudaStream_t stream) {
  const int64_t rows = int64_t(p.heads_q) * p.total_q;
  if (rows == 0) return cudaSuccess;
  RowFactorInputs in;
  in.cu_seqlens_q = p.cu_seqlens_q;
  in.batch = p.batch;
  in.total_q = p.total_q;
  in.padded_q = p.padded_q;
  in.heads_q = p.heads_q;
  in.causal = p.causal != 0;
  in.scale_log2 = p.scale_log2;
  in.q_exp = p.q_exp;
  in.d_o_exp = p.d_o_exp;
  in.d_o_scaled_exp = p.d_o_scaled_exp;
  in.delta = p.delta;
  in.softmax_stats = p.softmax_stats;
  in.device_status = p.device_status;
  const int blocks =
      int(std::min<int64_t>((rows + kFactorThreads - 1) / kFactorThreads, kMaxBlocks));
  row_factors_kernel<<<blocks, kFactorThreads, 0, stream>>>(in, out);
  return cudaGetLastError();
}

}  // namespace flamia::backward
