// Times the FP8 forward kernel alone (operands already quantized) on one packed workload.
//   bench_forward_kernel --docs 2048,2048 --heads-q 16 --heads-kv 16 --head-dim 128 [--full]
// Prints one JSON line: {"ms": median, "tflops": ..., "output_hash": {"o", "lse", "stats"}} (FLOPs:
// workloads.json's convention; the outputs' bytes hashed, to compare two builds bit for bit).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "bench_util.cuh"
#include "kernels/forward/forward.h"

using namespace flamia::bench;

int main(int argc, char** argv) {
  KernelWorkload w;
  for (int i = 1; i < argc; ++i) parse_workload_flag(argc, argv, i, w);
  const int heads_q = w.heads_q, heads_kv = w.heads_kv, head_dim = w.head_dim;
  const double flops = attention_flops(w);
  const flamia::PackedShape s = packed_shape(w);
  const int total = s.total_q;

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
  fill_random_e4m3<<<kFp8FillBlocks, kFillThreads>>>(q, q_bytes, 1);
  fill_random_e4m3<<<kFp8FillBlocks, kFillThreads>>>(k, kv_bytes, 2);
  fill_random_e4m3<<<kFp8FillBlocks, kFillThreads>>>(vt, kv_bytes, 3);
  fill_exponents<<<kSmallFillBlocks, kFillThreads>>>(qe, size_t(heads_q) * total, -6);
  fill_exponents<<<kSmallFillBlocks, kFillThreads>>>(ke, size_t(heads_kv) * total, -6);
  fill_exponents<<<kSmallFillBlocks, kFillThreads>>>(ve, size_t(heads_kv) * total, -5);
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
  const double ms = median_ms(kWarmupLaunches, w.iters, nullptr,
                              [&] { CHECK(flamia::launch_forward(args, nullptr)); });
#if FLAMIA_TIMELINE
  write_timeline(flamia::timeline::reset_forward, flamia::timeline::copy_forward,
                 [&] { CHECK(flamia::launch_forward(args, nullptr)); });
#endif
  const std::string hashes = output_hashes_json({{"o", o, q_bytes * 2},
                                                 {"lse", lse, size_t(heads_q) * total * 4},
                                                 {"stats", stats, size_t(heads_q) * total * 8}});
  print_timing_json(ms, flops, total, hashes.c_str());
  return 0;
}
