// What the kernel benchmarks (bench_*.cu, one executable each) share: error checks, device
// allocation and fills of synthetic operands, the packed workload of --docs/--heads-*/--head-dim,
// and the CUDA-event median timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/layout.h"
#include "kernels/common/timeline.h"

#define CHECK(x)                                                          \
  do {                                                                    \
    const cudaError_t e = (x);                                            \
    if (e != cudaSuccess) {                                               \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

namespace flamia::bench {

// Launch shapes of the fill kernels (grid-stride loops: any size works).
constexpr int kFillThreads = 256;
constexpr int kFp8FillBlocks = 1024;
constexpr int kSmallFillBlocks = 256;

// Untimed launches before the timed ones of the kernel benchmarks.
constexpr int kWarmupLaunches = 3;

// A cheap hash of (element index, seed): the randomness of the synthetic operands.
__device__ __forceinline__ uint32_t element_hash(size_t i, uint32_t seed) {
  uint32_t h = uint32_t(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

// Random E4M3 bytes: sign, exponent 4..11 (|x| in [2^-3, 2^5)), random mantissa: never NaN.
__global__ void fill_random_e4m3(uint8_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = element_hash(i, seed);
    x[i] = uint8_t((h & 0x80) | (((h >> 8) % 8 + 4) << 3) | (h >> 16 & 7));
  }
}

// Scale exponents value, value - 1, value - 2, value, ... along the buffer.
__global__ void fill_exponents(int8_t* x, size_t n, int value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = int8_t(value - int(i % 3));
}

// "2048,17,1" -> {2048, 17, 1} (atoi per item: no validation, a benchmark's input).
inline std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

// `count` elements of T on the device (at least one, so that empty buffers are not null).
template <typename T>
T* device_alloc(size_t count) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// The packed workload of the forward and backward kernel benchmarks.
struct KernelWorkload {
  std::vector<int> docs = {2048, 2048};
  int heads_q = 16;
  int heads_kv = 16;
  int head_dim = 128;
  int iters = 20;
  bool causal = true;
};

// Reads argv[i] (and its value) into `w` when it is one of --docs, --heads-q, --heads-kv,
// --head-dim, --iters, --full; returns whether it was. A flag missing its value is not one.
inline bool parse_workload_flag(int argc, char** argv, int& i, KernelWorkload& w) {
  const bool has_value = i + 1 < argc;
  if (!std::strcmp(argv[i], "--docs") && has_value)
    w.docs = parse_list(argv[++i]);
  else if (!std::strcmp(argv[i], "--heads-q") && has_value)
    w.heads_q = std::atoi(argv[++i]);
  else if (!std::strcmp(argv[i], "--heads-kv") && has_value)
    w.heads_kv = std::atoi(argv[++i]);
  else if (!std::strcmp(argv[i], "--head-dim") && has_value)
    w.head_dim = std::atoi(argv[++i]);
  else if (!std::strcmp(argv[i], "--iters") && has_value)
    w.iters = std::atoi(argv[++i]);
  else if (!std::strcmp(argv[i], "--full"))
    w.causal = false;
  else
    return false;
  return true;
}

// FLOPs of the workload by workloads.json's convention (4 L^2 d per head and document, half of
// it when causal), times `factor` (the backward's multiple of the forward).
inline double attention_flops(const KernelWorkload& w, double factor = 1.0) {
  double flops = 0;
  for (int l : w.docs)
    flops += factor * 4.0 * l * l * w.head_dim * w.heads_q * (w.causal ? 0.5 : 1.0);
  return flops;
}

// The shape of `w` (queries and keys alike), with cu_seqlens on the device.
inline PackedShape packed_shape(const KernelWorkload& w) {
  std::vector<int32_t> cu = {0};
  int max_len = 0;
  for (int l : w.docs) {
    cu.push_back(cu.back() + l);
    max_len = std::max(max_len, l);
  }
  int32_t* d_cu = device_alloc<int32_t>(cu.size());
  CHECK(cudaMemcpy(d_cu, cu.data(), cu.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  PackedShape s;
  s.cu_seqlens_q = s.cu_seqlens_k = d_cu;
  s.batch = int(w.docs.size());
  s.total_q = s.total_k = cu.back();
  s.heads_q = w.heads_q;
  s.heads_kv = w.heads_kv;
  s.head_dim = w.head_dim;
  s.max_seqlen_q = s.max_seqlen_k = max_len;
  s.causal = w.causal;
  return s;
}

// Median time of `run` in milliseconds: `warmup` untimed runs, then CUDA events around each of
// `repeats` runs (at least one) on `stream`.
inline double median_ms(int warmup, int repeats, cudaStream_t stream,
                        const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(size_t(std::max(repeats, 1)));
  for (float& m : ms) {
    CHECK(cudaEventRecord(start, stream));
    run();
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The timeline probe (kernels/common/timeline.h, builds with FLAMIA_TIMELINE only): one more
// launch with the stamps zeroed, written to the file FLAMIA_TIMELINE_OUT names (raw uint64,
// timeline::kSlots x kEvents) for bench/timeline_report.py. Without the option: nothing.
inline void write_timeline(const std::function<void()>& reset,
                           const std::function<void(uint64_t*)>& copy,
                           const std::function<void()>& run) {
  const char* path = std::getenv("FLAMIA_TIMELINE_OUT");
  if (path == nullptr) return;
  reset();
  run();
  CHECK(cudaDeviceSynchronize());
  std::vector<uint64_t> stamps(size_t(timeline::kSlots) * timeline::kEvents);
  copy(stamps.data());
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return;
  std::fwrite(stamps.data(), sizeof(uint64_t), stamps.size(), f);
  std::fclose(f);
}

// FNV-1a over a device buffer's bytes (after the timed launches): two builds that must agree
// bit for bit print the same value. A buffer of zero bytes only is printed as "all-zero"
// instead: equal zeros prove nothing about two builds (the backward benchmark's inputs once
// rounded every P̂ to 0, and its gradient hashes compared zeros).
inline std::string device_bytes_hash(const void* device_data, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  CHECK(cudaMemcpy(host.data(), device_data, bytes, cudaMemcpyDeviceToHost));
  uint64_t hash = 0xcbf29ce484222325ull;
  uint8_t any = 0;
  for (uint8_t b : host) {
    hash = (hash ^ b) * 0x100000001b3ull;
    any |= b;
  }
  if (any == 0) return "all-zero";
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)hash);
  return hex;
}

// One output buffer of a kernel benchmark, for output_hashes_json.
struct HashedOutput {
  const char* name;
  const void* device_data;
  size_t bytes;
};

// "output_hash": {"name": "<16 hex digits>", ...}: the member print_timing_json adds.
inline std::string output_hashes_json(std::initializer_list<HashedOutput> outputs) {
  std::string json = "\"output_hash\": {";
  for (const HashedOutput& out : outputs) {
    json += std::string(json.back() == '{' ? "" : ", ") + "\"" + out.name + "\": \"" +
            device_bytes_hash(out.device_data, out.bytes) + "\"";
  }
  return json + "}";
}

// The kernel benchmarks' one JSON line; `extra` (optional) adds members, e.g. the output hashes.
inline void print_timing_json(double ms, double flops, int tokens, const char* extra = nullptr) {
  std::printf("{\"ms\": %.4f, \"tflops\": %.1f, \"tokens\": %d%s%s}\n", ms, flops / ms / 1e9,
              tokens, extra ? ", " : "", extra ? extra : "");
}

}  // namespace flamia::bench
