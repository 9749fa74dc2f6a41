// Validation and launch of the quantize jobs: one launch per kernel instance (head dim, and
// with/without the gradient extras) for all its jobs, one CTA per (tile of kTileTokens tokens,
// head) of each job.
#include <cstdint>

#include "kernels/quantize/quantize.h"
#include "kernels/quantize/gradient_token_kernel.cuh"
#include "kernels/quantize/quantize_kernel.cuh"
#include "kernels/quantize/quantize_launch.h"
#include "kernels/quantize/token_scale_kernel.cuh"

namespace flamia {

bool quantize_supports_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

namespace quantize {
namespace {

constexpr uintptr_t kVectorAlignment = 16;  // uint4 accesses
constexpr int64_t kStrideMultiple = 8;      // BF16 elements per 16 bytes
constexpr int64_t kMaxCtas = 2147483647;    // CTA indices are ints (1-D grid)

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVectorAlignment == 0;
}

bool source_valid(const TensorSource& src) {
  return src.data != nullptr && aligned(src.data) && src.token_stride % kStrideMultiple == 0 &&
         src.head_stride % kStrideMultiple == 0;
}

// The gradient kernel serves jobs with delta or an x * fl(1/l) copy (dO); the other kernel the
// rest.
bool is_gradient_job(const TensorJob& job) {
  if (job.delta.out != nullptr) return true;
  for (int k = 0; k < job.num_copies; ++k)
    if (job.copy[k].transform == Transform::kTimesInverseL) return true;
  return false;
}

bool job_valid(const TensorJob& job) {
  if (job.tokens < 0 || job.heads <= 0) return false;
  if (!source_valid(job.x)) return false;
  if (job.needs_documents && (job.cu_seqlens == nullptr || job.batch <= 0)) return false;
  for (int k = 0; k < job.num_copies; ++k) {
    const CopySpec& copy = job.copy[k];
    if (!aligned(copy.row_major) || !aligned(copy.token_major)) return false;
    if (copy.transform == Transform::kSubtractVector && job.shift_vector == nullptr) return false;
    if (copy.transform == Transform::kTimesInverseL && job.softmax_stats == nullptr) return false;
  }
  const LseShiftSpec& lse = job.lse_shift;
  if (lse.out != nullptr) {
    if (lse.kv_group <= 0) return false;
    if (lse.source == KeySmoothing::kVector && lse.vector == nullptr) return false;
    if (lse.source != KeySmoothing::kNone && lse.cu_seqlens_k == nullptr) return false;
    if (lse.source == KeySmoothing::kFirstKey && !source_valid(lse.keys)) return false;
  }
  if (job.delta.out != nullptr && (job.num_copies == 0 || !source_valid(job.delta.o))) return false;
  const ZeroRowsSpec& zero = job.zero_rows;
  if (zero.base != nullptr && (!aligned(zero.base) || zero.row_floats <= 0 ||
                               zero.row_floats % 4 != 0 || !is_gradient_job(job)))
    return false;
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

int64_t cta_count(const TensorJob& job) {
  return (int64_t(job.tokens) + kTileTokens - 1) / kTileTokens * job.heads;
}

// One CTA per tile and head of the batch's jobs, with `Shared` as dynamic shared memory.
template <int kHeadDim, typename Shared>
cudaError_t launch_with_dynamic_smem(void (*kernel)(JobBatch), const JobBatch& batch,
                                     cudaStream_t stream) {
  const int smem_bytes = int(sizeof(Shared));
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (status != cudaSuccess) return status;
  kernel<<<unsigned(batch.cta_begin[batch.count]), TileGeometry<kHeadDim>::kThreads, smem_bytes,
           stream>>>(batch);
  return cudaGetLastError();
}

template <int kHeadDim, bool kGradient>
cudaError_t launch_kernel(const JobBatch& batch, cudaStream_t stream) {
  return launch_with_dynamic_smem<kHeadDim, QuantizeShared<kHeadDim, kGradient>>(
      quantize_tensor_kernel<kHeadDim, kGradient>, batch, stream);
}

template <int kHeadDim>
cudaError_t launch_token_scale_kernel(const JobBatch& batch, cudaStream_t stream) {
  token_scale_kernel<kHeadDim>
      <<<unsigned(batch.cta_begin[batch.count]), TileGeometry<kHeadDim>::kThreads, 0, stream>>>(
          batch);
  return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t launch_gradient_token_kernel(const JobBatch& batch, cudaStream_t stream) {
  return launch_with_dynamic_smem<kHeadDim, GradientTokenShared<kHeadDim>>(
      gradient_token_kernel<kHeadDim>, batch, stream);
}

template <int kHeadDim>
cudaError_t launch_for_head_dim(const JobBatch& batch, bool gradient, cudaStream_t stream) {
  return gradient ? launch_kernel<kHeadDim, true>(batch, stream)
                  : launch_kernel<kHeadDim, false>(batch, stream);
}

cudaError_t launch_batch(const JobBatch& batch, int head_dim, bool gradient, cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return launch_for_head_dim<64>(batch, gradient, stream);
    case 128:
      return launch_for_head_dim<128>(batch, gradient, stream);
    default:
      return launch_for_head_dim<256>(batch, gradient, stream);
  }
}

// Appends `job` (with its CTAs) to `batch`; false when the CTA count overflows.
bool append_job(JobBatch& batch, int64_t& ctas, const TensorJob& job) {
  ctas += cta_count(job);
  if (ctas > kMaxCtas) return false;
  batch.job[batch.count++] = job;
  batch.cta_begin[batch.count] = int(ctas);
  return true;
}

}  // namespace

cudaError_t launch_tensor_jobs(TensorJob* jobs, int count, int head_dim, cudaStream_t stream,
                               bool general_kernel_only) {
  if (!quantize_supports_head_dim(head_dim) || count > kMaxJobsPerLaunch)
    return cudaErrorInvalidValue;
  for (int n = 0; n < count; ++n) {
    TensorJob& job = jobs[n];
    job.needs_documents = job_needs_documents(job);
    if (job_has_work(job) && !job_valid(job)) return cudaErrorInvalidValue;
  }
  // The plain jobs (independent of each other) in one launch: on the token-scale kernel when
  // it takes every one of them (a forward without key smoothing), else on the general kernel,
  // whose CTAs run the token-scale kernel's body for the jobs it takes (token_scale_path): one
  // grid, so a training forward's K job (general) and its Q and V jobs (token-scale) share the
  // GPU instead of running one launch after the other. Then each gradient job in a launch of
  // its own, on the gradient token kernel when it takes it, else on the general kernel's
  // gradient instance (both read their one job at constant offsets: indexed by the CTA, its
  // fields cost the general kernel 5% in session 13's A/B).
  JobBatch plain;
  int64_t plain_ctas = 0;
  const bool register_dim = !general_kernel_only && register_kernel_head_dim(head_dim);
  bool all_token_scale = true;
  for (int n = 0; n < count; ++n) {
    if (!job_has_work(jobs[n]) || is_gradient_job(jobs[n])) continue;
    TensorJob job = jobs[n];
    job.token_scale_path = register_dim && token_scale_kernel_takes(job);
    all_token_scale = all_token_scale && job.token_scale_path;
    if (!append_job(plain, plain_ctas, job)) return cudaErrorInvalidValue;
  }
  if (plain.count > 0) {
    cudaError_t status;
    if (all_token_scale) {
      status = head_dim == 64 ? launch_token_scale_kernel<64>(plain, stream)
                              : launch_token_scale_kernel<128>(plain, stream);
    } else {
      status = launch_batch(plain, head_dim, /*gradient=*/false, stream);
    }
    if (status != cudaSuccess) return status;
  }
  for (int n = 0; n < count; ++n) {
    if (!job_has_work(jobs[n]) || !is_gradient_job(jobs[n])) continue;
    if (cta_count(jobs[n]) > kMaxCtas) return cudaErrorInvalidValue;
    JobBatch single;
    single.job[0] = jobs[n];
    single.count = 1;
    single.cta_begin[1] = int(cta_count(jobs[n]));
    cudaError_t status;
    if (register_dim && gradient_token_kernel_takes(jobs[n])) {
      status = head_dim == 64 ? launch_gradient_token_kernel<64>(single, stream)
                              : launch_gradient_token_kernel<128>(single, stream);
    } else {
      status = launch_batch(single, head_dim, /*gradient=*/true, stream);
    }
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace quantize
}  // namespace flamia
