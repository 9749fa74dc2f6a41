// Times the backward kernel alone (operands already quantized: launch_backward = dQ buffer
// zeroing + backward kernel + dQ post-pass) on one packed workload.
//   bench_backward_kernel --docs 2048,2048 --heads-q 16 --heads-kv 16 --head-dim 128
//                         [--full] [--bf16grad] [--deterministic] [--iters 20]
// Prints one JSON line: {"ms": median, "tflops": ...}. FLOPs: 2.5 x the forward's (five
// products against two), the causal half when causal.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backward/backward.h"

namespace {

constexpr double kBackwardFlopsPerForward = 2.5;

__global__ void fill_random_e4m3(uint8_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    // sign, exponent 4..11 (|x| in [2^-3, 2^5)), random mantissa: never NaN
    x[i] = uint8_t((h & 0x80) | (((h >> 8) % 8 + 4) << 3) | (h >> 16 & 7));
  }
}

__global__ void fill_bytes(int8_t* x, size_t n, int value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = int8_t(value - int(i % 3));
}

__global__ void fill_floats(float* x, size_t n, float even, float odd) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = (i % 2) ? odd : even;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

#define CHECK(x)                                                          \
  do {                                                                    \
    cudaError_t e = (x);                                                  \
    if (e != cudaSuccess) {                                               \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

template <typename T>
T* device_alloc(size_t count) {
  T* p = nullptr;
  CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  return p;
}

uint8_t* random_fp8(size_t bytes, uint32_t seed) {
  uint8_t* p = device_alloc<uint8_t>(bytes);
  fill_random_e4m3<<<1024, 256>>>(p, bytes, seed);
  return p;
}

int8_t* exponents(size_t count, int value) {
  int8_t* p = device_alloc<int8_t>(count);
  fill_bytes<<<256, 256>>>(p, count, value);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> docs = {2048, 2048};
  int heads_q = 16, heads_kv = 16, head_dim = 128, iters = 20;
  bool causal = true, bf16grad = false, deterministic = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--docs") && i + 1 < argc)
      docs = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--heads-q") && i + 1 < argc)
      heads_q = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--heads-kv") && i + 1 < argc)
      heads_kv = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--head-dim") && i + 1 < argc)
      head_dim = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--full"))
      causal = false;
    else if (!std::strcmp(argv[i], "--bf16grad"))
      bf16grad = true;
    else if (!std::strcmp(argv[i], "--deterministic"))
      deterministic = true;
  }
  std::vector<int32_t> cu = {0};
  double flops = 0;
  int max_len = 0;
  for (int l : docs) {
    cu.push_back(cu.back() + l);
    max_len = std::max(max_len, l);
    flops += kBackwardFlopsPerForward * 4.0 * l * l * head_dim * heads_q * (causal ? 0.5 : 1.0);
  }
  const int total = cu.back();
  flamia::PackedShape s;
  int32_t* d_cu = device_alloc<int32_t>(cu.size());
  CHECK(cudaMemcpy(d_cu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  s.cu_seqlens_q = s.cu_seqlens_k = d_cu;
  s.batch = int(docs.size());
  s.total_q = s.total_k = total;
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  s.head_dim = head_dim;
  s.max_seqlen_q = s.max_seqlen_k = max_len;
  s.causal = causal;

  const size_t q_bytes = size_t(total) * heads_q * head_dim;
  const size_t kv_bytes = size_t(total) * heads_kv * head_dim;
  const size_t qt_bytes = size_t(flamia::padded_tokens(total)) * heads_q * head_dim;
  const size_t kvt_bytes = size_t(flamia::padded_tokens(total)) * heads_kv * head_dim;
  const size_t q_rows = size_t(heads_q) * total, kv_rows = size_t(heads_kv) * total;

  flamia::BackwardKernelArgs a;
  a.shape = s;
  a.softmax_scale = 1.0f / std::sqrt(float(head_dim));
  a.precision =
      bf16grad ? flamia::BackwardPrecision::kFp8Bf16Grad : flamia::BackwardPrecision::kFp8;
  a.deterministic = deterministic;
  int8_t* q_exp = exponents(q_rows, -6);
  int8_t* v_exp = exponents(kv_rows, -5);
  a.fwd.q = {random_fp8(q_bytes, 1), q_exp};
  a.fwd.k = {random_fp8(kv_bytes, 2), exponents(kv_rows, -6)};
  a.fwd.v_t = {random_fp8(kvt_bytes, 3), v_exp};
  a.bwd.q_t = {random_fp8(qt_bytes, 4), q_exp};
  a.bwd.k_centered_t = {random_fp8(kvt_bytes, 5), exponents(kv_rows, -6)};
  a.bwd.v = {random_fp8(kv_bytes, 6), v_exp};
  a.bwd.d_o = {random_fp8(q_bytes, 7), exponents(q_rows, -8)};
  a.bwd.d_o_scaled_t = {random_fp8(qt_bytes, 8), exponents(q_rows, -12)};
  a.bwd.delta = device_alloc<float>(q_rows);
  fill_floats<<<256, 256>>>(a.bwd.delta, q_rows, 0.01f, 0.01f);
  float* stats = device_alloc<float>(q_rows * 2);
  fill_floats<<<256, 256>>>(stats, q_rows * 2, 24.0f, 1000.0f);  // {M, l}
  a.softmax_stats = stats;
  // BF16 inputs: reuse FP8 bytes as BF16 bit patterns (finite: exponent bits from E4M3 bytes).
  uint16_t* bf16_q = reinterpret_cast<uint16_t*>(random_fp8(q_bytes * 2, 9));
  uint16_t* bf16_kv = reinterpret_cast<uint16_t*>(random_fp8(kv_bytes * 2, 10));
  a.q = {bf16_q, int64_t(heads_q) * head_dim, head_dim};
  a.d_o = a.q;
  a.k = {bf16_kv, int64_t(heads_kv) * head_dim, head_dim};
  a.v = a.k;
  void* dq = device_alloc<uint16_t>(q_bytes);
  void* dk = device_alloc<uint16_t>(kv_bytes);
  void* dv = device_alloc<uint16_t>(kv_bytes);
  a.dq = {dq, int64_t(heads_q) * head_dim, head_dim};
  a.dk = {dk, int64_t(heads_kv) * head_dim, head_dim};
  a.dv = {dv, int64_t(heads_kv) * head_dim, head_dim};
  a.scratch = device_alloc<uint8_t>(flamia::backward_scratch_bytes(s, deterministic));

  for (int w = 0; w < 3; ++w) CHECK(flamia::launch_backward(a, nullptr));
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  for (int it = 0; it < iters; ++it) {
    cudaEventRecord(start);
    CHECK(flamia::launch_backward(a, nullptr));
    cudaEventRecord(stop);
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const float ms = times[times.size() / 2];
  std::printf("{\"ms\": %.4f, \"tflops\": %.1f, \"tokens\": %d}\n", ms, flops / ms / 1e9, total);
  return 0;
}
