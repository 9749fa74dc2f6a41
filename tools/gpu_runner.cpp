// GPU path of the demo through the public C API. Outputs are poisoned with NaN before every
// checked run, so an element the kernels never write shows up in the accuracy numbers.
#include "gpu_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "flamia/flamia.h"
#include "reference/api_problem.h"

namespace flamia::cli {

namespace {

constexpr int kHopperMajor = 9;
constexpr int kHopperMinor = 0;
constexpr int kPoisonByte = 0xFF;  // BF16 0xFFFF and FP32 0xFFFFFFFF are NaN

// Owns one device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t err = cudaMalloc(&data_, bytes);
    if (err != cudaSuccess)
      throw std::runtime_error(std::string("cudaMalloc: ") + cudaGetErrorString(err));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

void flamia_check(flamia_status status, const char* what) {
  if (status != FLAMIA_OK)
    throw std::runtime_error(std::string(what) + ": " + flamia_status_name(status) + ": " +
                             flamia_last_error_message());
}

template <typename T>
void upload(DeviceBuffer& dst, const std::vector<T>& src) {
  if (src.empty()) return;
  cuda_check(cudaMemcpy(dst.get(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice),
             "cudaMemcpy to device");
}

template <typename T>
std::vector<T> download(const DeviceBuffer& src, size_t count) {
  std::vector<T> out(count);
  if (count)
    cuda_check(cudaMemcpy(out.data(), src.get(), count * sizeof(T), cudaMemcpyDeviceToHost),
               "cudaMemcpy to host");
  return out;
}

std::vector<float> bf16_to_float(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = ref::bf16_to_float(bits[i]);
  return out;
}

flamia_tensor tensor(const DeviceBuffer& buffer, int heads, int dim) {
  return {buffer.get(), int64_t(heads) * dim, int64_t(dim)};
}

// Device copies of one problem and its inputs and outputs.
struct DeviceProblem {
  DeviceProblem(const ref::Problem& p, const ref::Inputs& in)
      : cu_q(p.cu_seqlens_q.size() * sizeof(int32_t)),
        cu_k(p.cu_seqlens_k.size() * sizeof(int32_t)),
        q(in.q.bits.size() * 2),
        k(in.k.bits.size() * 2),
        v(in.v.bits.size() * 2),
        d_o(in.d_o.bits.size() * 2),
        o(in.q.bits.size() * 2),
        dq(in.q.bits.size() * 2),
        dk(in.k.bits.size() * 2),
        dv(in.v.bits.size() * 2),
        lse(size_t(p.heads_q) * p.total_q() * sizeof(float)),
        stats(size_t(p.heads_q) * p.total_q() * 2 * sizeof(float)),
        smoothing(p.smoothing_vector.size() * sizeof(float)),
        static_exponents(p.static_key_exponents.size() + p.static_value_exponents.size()) {
    upload(cu_q, p.cu_seqlens_q);
    upload(cu_k, p.cu_seqlens_k);
    upload(q, in.q.bits);
    upload(k, in.k.bits);
    upload(v, in.v.bits);
    upload(d_o, in.d_o.bits);
    upload(smoothing, p.smoothing_vector);
    upload(static_exponents, ref::static_exponents_key_then_value(p));

    problem = ref::api_problem(p, static_cast<const int32_t*>(cu_q.get()),
                               static_cast<const int32_t*>(cu_k.get()),
                               static_cast<const float*>(smoothing.get()),
                               static_cast<const int8_t*>(static_exponents.get()));
  }

  void poison(const DeviceBuffer& buffer, cudaStream_t stream) {
    if (buffer.bytes())
      cuda_check(cudaMemsetAsync(buffer.get(), kPoisonByte, buffer.bytes(), stream),
                 "cudaMemsetAsync");
  }

  DeviceBuffer cu_q, cu_k, q, k, v, d_o, o, dq, dk, dv, lse, stats, smoothing, static_exponents;
  flamia_problem problem;
};

// Times `repeats` calls of `call` on `stream` with CUDA events (ms per call).
template <typename Call>
double time_calls(cudaStream_t stream, int repeats, Call call) {
  if (repeats <= 0) return 0.0;
  cudaEvent_t start, stop;
  cuda_check(cudaEventCreate(&start), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
  cuda_check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int r = 0; r < repeats; ++r) call();
  cuda_check(cudaEventRecord(stop, stream), "cudaEventRecord");
  cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.0f;
  cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / repeats;
}

class Stream {
 public:
  Stream() { cuda_check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

GpuRun run_checked(const ref::Problem& p, const ref::Inputs& in, bool with_backward,
                   BackwardPrecision precision, int repeats) {
  GpuRun run;
  Stream stream;
  DeviceProblem dev(p, in);

  flamia_forward_args fwd;
  std::memset(&fwd, 0, sizeof(fwd));
  fwd.problem = dev.problem;
  fwd.q = tensor(dev.q, p.heads_q, p.head_dim);
  fwd.k = tensor(dev.k, p.heads_kv, p.head_dim);
  fwd.v = tensor(dev.v, p.heads_kv, p.head_dim);
  fwd.o = tensor(dev.o, p.heads_q, p.head_dim);
  fwd.lse = static_cast<float*>(dev.lse.get());
  fwd.softmax_stats = static_cast<float*>(dev.stats.get());
  fwd.stream = stream.get();
  size_t forward_bytes = 0;
  flamia_check(flamia_forward_workspace_size(&fwd, &forward_bytes),
               "flamia_forward_workspace_size");
  DeviceBuffer forward_workspace(forward_bytes);
  fwd.workspace = forward_workspace.get();
  fwd.workspace_bytes = forward_bytes;
  if (const char* path = flamia_describe_forward(&fwd)) run.path = path;

  dev.poison(dev.o, stream.get());
  dev.poison(dev.lse, stream.get());
  dev.poison(dev.stats, stream.get());
  flamia_check(flamia_forward(&fwd), "flamia_forward");
  flamia_check(flamia_check_device_status(fwd.workspace, fwd.stream), "forward device status");
  run.o = bf16_to_float(download<uint16_t>(dev.o, in.q.bits.size()));
  run.lse = download<float>(dev.lse, size_t(p.heads_q) * p.total_q());
  run.softmax_stats = download<float>(dev.stats, size_t(p.heads_q) * p.total_q() * 2);

  if (with_backward) {
    flamia_backward_args bwd;
    std::memset(&bwd, 0, sizeof(bwd));
    bwd.problem = dev.problem;
    bwd.q = fwd.q;
    bwd.k = fwd.k;
    bwd.v = fwd.v;
    bwd.o = fwd.o;
    bwd.d_o = tensor(dev.d_o, p.heads_q, p.head_dim);
    bwd.lse = fwd.lse;
    bwd.softmax_stats = fwd.softmax_stats;
    bwd.dq = tensor(dev.dq, p.heads_q, p.head_dim);
    bwd.dk = tensor(dev.dk, p.heads_kv, p.head_dim);
    bwd.dv = tensor(dev.dv, p.heads_kv, p.head_dim);
    bwd.precision =
        precision == BackwardPrecision::kFp8 ? FLAMIA_PRECISION_FP8 : FLAMIA_PRECISION_FP8_BF16GRAD;
    bwd.deterministic = 0;
    bwd.stream = stream.get();
    size_t backward_bytes = 0;
    flamia_check(flamia_backward_workspace_size(&bwd, &backward_bytes),
                 "flamia_backward_workspace_size");
    DeviceBuffer backward_workspace(backward_bytes);
    bwd.workspace = backward_workspace.get();
    bwd.workspace_bytes = backward_bytes;
    dev.poison(dev.dq, stream.get());
    dev.poison(dev.dk, stream.get());
    dev.poison(dev.dv, stream.get());
    flamia_check(flamia_backward(&bwd), "flamia_backward");
    flamia_check(flamia_check_device_status(bwd.workspace, bwd.stream), "backward device status");
    run.dq = bf16_to_float(download<uint16_t>(dev.dq, in.q.bits.size()));
    run.dk = bf16_to_float(download<uint16_t>(dev.dk, in.k.bits.size()));
    run.dv = bf16_to_float(download<uint16_t>(dev.dv, in.v.bits.size()));
    run.with_backward = true;
    run.backward_ms = time_calls(stream.get(), repeats, [&] { flamia_backward(&bwd); });
    flamia_check(flamia_check_device_status(bwd.workspace, bwd.stream), "backward device status");
  }
  run.forward_ms = time_calls(stream.get(), repeats, [&] { flamia_forward(&fwd); });
  flamia_check(flamia_check_device_status(fwd.workspace, fwd.stream), "forward device status");
  run.ok = true;
  return run;
}

}  // namespace

GpuDevice probe_gpu() {
  GpuDevice device;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    device.description = "no CUDA device";
    return device;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    device.description = "cudaGetDeviceProperties failed";
    return device;
  }
  device.description = std::string(prop.name) + " (compute capability " +
                       std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
  device.usable = prop.major == kHopperMajor && prop.minor == kHopperMinor;
  return device;
}

GpuRun run_gpu(const ref::Problem& problem, const ref::Inputs& inputs, bool backward,
               BackwardPrecision precision, int repeats) {
  try {
    return run_checked(problem, inputs, backward, precision, repeats);
  } catch (const std::exception& e) {
    GpuRun failed;
    failed.error = e.what();
    return failed;
  }
}

ref::AuditForward gpu_audit_forward() {
  return [](const ref::Problem& p, const ref::Inputs& in) {
    GpuRun run = run_gpu(p, in, false, BackwardPrecision::kFp8, 0);
    if (!run.ok) throw std::runtime_error("GPU forward: " + run.error);
    return run.o;
  };
}

}  // namespace flamia::cli
