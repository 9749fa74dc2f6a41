// Validation and launch of one quantize job: grid (tiles of kTileTokens tokens, heads), one
// kernel instance per head dim (and with/without the delta extra, which holds O in registers).
#include <cstdint>

#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_kernel.cuh"
#include "kernels/quantize/quantize_launch.h"

namespace flamia {

bool quantize_supports_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

namespace quantize {
namespace {

constexpr uintptr_t kVectorAlignment = 16;  // uint4 accesses
constexpr int64_t kStrideMultiple = 8;      // BF16 elements per 16 bytes
constexpr unsigned kMaxGridY = 65535;

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVectorAlignment == 0;
}

bool source_valid(const TensorSource& src) {
  return src.data != nullptr && aligned(src.data) && src.token_stride % kStrideMultiple == 0 &&
         src.head_stride % kStrideMultiple == 0;
}

bool job_valid(const TensorJob& job) {
  if (job.tokens < 0 || job.heads <= 0 || unsigned(job.heads) > kMaxGridY) return false;
  if (!source_valid(job.x)) return false;
  if (job.needs_documents && (job.cu_seqlens == nullptr || job.batch <= 0)) return false;
  for (int k = 0; k < job.num_copies; ++k) {
    const CopySpec& copy = job.copy[k];
    if (!aligned(copy.row_major) || !aligned(copy.token_major)) return false;
    if (copy.transform == Transform::kSubtractVector && job.shift_vector == nullptr) return false;
    if (copy.transform == Transform::kDivideByL && job.softmax_stats == nullptr) return false;
  }
  const LseShiftSpec& lse = job.lse_shift;
  if (lse.out != nullptr) {
    if (lse.kv_group <= 0) return false;
    if (lse.source == KeySmoothing::kVector && lse.vector == nullptr) return false;
    if (lse.source != KeySmoothing::kNone && lse.cu_seqlens_k == nullptr) return false;
    if (lse.source == KeySmoothing::kFirstKey && !source_valid(lse.keys)) return false;
  }
  if (job.delta.out != nullptr && (job.num_copies == 0 || !source_valid(job.delta.o))) return false;
  return true;
}

bool job_needs_documents(const TensorJob& job) {
  for (int k = 0; k < job.num_copies; ++k) {
    if (job.copy[k].blocks != BlockKind::kToken) return true;
    if (job.copy[k].transform == Transform::kSubtractFirstKey) return true;
  }
  // The LSE shift is 0 for queries whose key document is empty.
  return job.lse_shift.out != nullptr && job.lse_shift.source != KeySmoothing::kNone;
}

bool job_has_work(const TensorJob& job) {
  return job.tokens > 0 &&
         (job.num_copies > 0 || job.lse_shift.out != nullptr || job.delta.out != nullptr);
}

template <int kHeadDim, bool kGradient>
cudaError_t launch_kernel(const TensorJob& job, cudaStream_t stream) {
  const auto kernel = quantize_tensor_kernel<kHeadDim, kGradient>;
  const int smem_bytes = int(sizeof(QuantizeShared<kHeadDim, kGradient>));
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (status != cudaSuccess) return status;
  const dim3 grid(unsigned((job.tokens + kTileTokens - 1) / kTileTokens), unsigned(job.heads));
  kernel<<<grid, TileGeometry<kHeadDim>::kThreads, smem_bytes, stream>>>(job);
  return cudaGetLastError();
}

// The gradient kernel serves jobs with delta or an x / l copy (dO); the other kernel the rest.
bool is_gradient_job(const TensorJob& job) {
  if (job.delta.out != nullptr) return true;
  for (int k = 0; k < job.num_copies; ++k)
    if (job.copy[k].transform == Transform::kDivideByL) return true;
  return false;
}

template <int kHeadDim>
cudaError_t launch_for_head_dim(const TensorJob& job, cudaStream_t stream) {
  return is_gradient_job(job) ? launch_kernel<kHeadDim, true>(job, stream)
                              : launch_kernel<kHeadDim, false>(job, stream);
}

}  // namespace

cudaError_t launch_tensor_jobs(TensorJob* jobs, int count, int head_dim, cudaStream_t stream) {
  if (!quantize_supports_head_dim(head_dim)) return cudaErrorInvalidValue;
  for (int n = 0; n < count; ++n) {
    TensorJob& job = jobs[n];
    job.needs_documents = job_needs_documents(job);
    if (job_has_work(job) && !job_valid(job)) return cudaErrorInvalidValue;
  }
  for (int n = 0; n < count; ++n) {
    if (!job_has_work(jobs[n])) continue;
    cudaError_t status = cudaSuccess;
    switch (head_dim) {
      case 64:
        status = launch_for_head_dim<64>(jobs[n], stream);
        break;
      case 128:
        status = launch_for_head_dim<128>(jobs[n], stream);
        break;
      default:
        status = launch_for_head_dim<256>(jobs[n], stream);
        break;
    }
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace quantize
}  // namespace flamia
