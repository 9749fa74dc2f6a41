// Times the FP8 forward kernel alone (operands already quantized) on one packed workload.
//   bench_forward_kernel --docs 2048,2048 --heads-q 16 --heads-kv 16 --head-dim 128 [--full]
// Prints one JSON line: {"ms": median, "tflops": ...} (FLOPs: workloads.json's convention).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/forward/forward.h"

namespace {

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

__global__ void fill_exponents(int8_t* x, size_t n, int value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = int8_t(value - int(i % 3));
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

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> docs = {2048, 2048};
  int heads_q = 16, heads_kv = 16, head_dim = 128, iters = 20;
  bool causal = true;
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
  }
  std::vector<int32_t> cu = {0};
  double flops = 0;
  int max_len = 0;
  for (int l : docs) {
    cu.push_back(cu.back() + l);
    max_len = std::max(max_len, l);
    flops += 4.0 * l * l * head_dim * heads_q * (causal ? 0.5 : 1.0);
  }
  const int total = cu.back();
  flamia::PackedShape s;
  int32_t* d_cu;
  CHECK(cudaMalloc(&d_cu, cu.size() * 4));
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
  const size_t kv_bytes = size_t(flamia::padded_tokens(total)) * heads_kv * head_dim;
  uint8_t *q, *k, *vt;
  int8_t *qe, *ke, *ve;
  CHECK(cudaMalloc(&q, q_bytes));
  CHECK(cudaMalloc(&k, kv_bytes));
  CHECK(cudaMalloc(&vt, kv_bytes));
  CHECK(cudaMalloc(&qe, size_t(heads_q) * total));
  CHECK(cudaMalloc(&ke, size_t(heads_kv) * total));
  CHECK(cudaMalloc(&ve, size_t(heads_kv) * total));
  fill_random_e4m3<<<1024, 256>>>(q, q_bytes, 1);
  fill_random_e4m3<<<1024, 256>>>(k, kv_bytes, 2);
  fill_random_e4m3<<<1024, 256>>>(vt, kv_bytes, 3);
  fill_exponents<<<256, 256>>>(qe, size_t(heads_q) * total, -6);
  fill_exponents<<<256, 256>>>(ke, size_t(heads_kv) * total, -6);
  fill_exponents<<<256, 256>>>(ve, size_t(heads_kv) * total, -5);
  void *o, *sched;
  float *lse, *stats;
  CHECK(cudaMalloc(&o, q_bytes * 2));
  CHECK(cudaMalloc(&lse, size_t(heads_q) * total * 4));
  CHECK(cudaMalloc(&stats, size_t(heads_q) * total * 8));
  CHECK(cudaMalloc(&sched, flamia::forward_scheduler_workspace_bytes(s)));

  flamia::ForwardKernelArgs args;
  args.shape = s;
  args.softmax_scale = 1.0f / std::sqrt(float(head_dim));
  args.in.q = {q, qe};
  args.in.k = {k, ke};
  args.in.v_t = {vt, ve};
  args.o = {o, int64_t(heads_q) * head_dim, head_dim};
  args.lse = lse;
  args.softmax_stats = stats;
  args.scheduler_workspace = sched;
  for (int w = 0; w < 3; ++w) CHECK(flamia::launch_forward(args, nullptr));
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> times;
  for (int it = 0; it < iters; ++it) {
    cudaEventRecord(a);
    CHECK(flamia::launch_forward(args, nullptr));
    cudaEventRecord(b);
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const float ms = times[times.size() / 2];
  std::printf("{\"ms\": %.4f, \"tflops\": %.1f, \"tokens\": %d}\n", ms, flops / ms / 1e9, total);
  return 0;
}
