// Probe for compute-sanitizer's racecheck: the backward's hand-off pattern alone. A writer
// warpgroup fills one of two shared buffers per step and a reader warpgroup sums it; the
// reader frees a buffer with bar.arrive (kFreeByArrive) or bar.sync, the writer waits with
// bar.sync (PTX memory model: bar.arrive synchronizes with a bar.sync on the same barrier).
// Build: nvcc -arch=sm_90a -o named_barrier_handoff tools/probes/named_barrier_handoff.cu
// Run:   compute-sanitizer --tool racecheck ./named_barrier_handoff {arrive|sync}
#include <cstdio>
#include <cstring>

constexpr int kThreadsPerGroup = 128;
constexpr int kBuffers = 2;
constexpr int kSteps = 64;
constexpr int kFull = 1;   // + buffer
constexpr int kEmpty = 3;  // + buffer

__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

template <bool kFreeByArrive>
__global__ void handoff(long long* out) {
  __shared__ int buffer[kBuffers][kThreadsPerGroup];
  const int t = threadIdx.x % kThreadsPerGroup;
  const int all = 2 * kThreadsPerGroup;
  if (threadIdx.x < kThreadsPerGroup) {  // writer
    for (int s = 0; s < kSteps; ++s) {
      const int b = s % kBuffers;
      bar_sync(kEmpty + b, all);
      buffer[b][t] = s * kThreadsPerGroup + t;
      bar_arrive(kFull + b, all);
    }
  } else {  // reader
    long long sum = 0;
    for (int b = 0; b < kBuffers; ++b) bar_arrive(kEmpty + b, all);  // both start empty
    for (int s = 0; s < kSteps; ++s) {
      const int b = s % kBuffers;
      bar_sync(kFull + b, all);
      sum += buffer[b][(t + 37) % kThreadsPerGroup];
      if (s + kBuffers < kSteps) {
        if (kFreeByArrive)
          bar_arrive(kEmpty + b, all);
        else
          bar_sync(kEmpty + b, all);
      }
    }
    out[t] = sum;
  }
}

int main(int argc, char** argv) {
  const bool by_arrive = argc < 2 || std::strcmp(argv[1], "sync") != 0;
  long long* out = nullptr;
  cudaMalloc(&out, kThreadsPerGroup * sizeof(long long));
  if (by_arrive)
    handoff<true><<<1, 2 * kThreadsPerGroup>>>(out);
  else
    handoff<false><<<1, 2 * kThreadsPerGroup>>>(out);
  long long host[kThreadsPerGroup];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int t = 0; t < kThreadsPerGroup; ++t) {
    long long expected = 0;
    for (int s = 0; s < kSteps; ++s) expected += s * kThreadsPerGroup + (t + 37) % kThreadsPerGroup;
    wrong += host[t] != expected;
  }
  std::printf("%s: %s (%d wrong sums)\n", by_arrive ? "arrive" : "sync", wrong ? "FAIL" : "ok",
              wrong);
  return wrong != 0;
}
