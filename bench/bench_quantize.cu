// Times the quantize pass (src/kernels/quantize) against the device-to-device copy rate of the
// same GPU, measured in the same run.
//   bench_quantize [--tokens 131072] [--heads-q 32] [--heads-kv 32] [--head-dim 128]
//                  [--doc-length 8192] [--mode exact|block32] [--smoothing none|first|vector]
//                  [--warmup 3] [--repeats 20] [--json PATH]
// Forward: Q, K, V (BF16) -> Q̂, K̂, V̂ᵀ (+ LSE shift with smoothing). Backward: Q, K, V, O, dO
// -> Q̂ᵀ, K̂cᵀ, V̂, dÔ, dO''ᵀ, delta, plus Q̂, K̂, V̂ᵀ rebuilt in the same pass (what the C API's
// backward runs). Bytes = what the pass must read and write (inputs, outputs, exponents, stats;
// not the re-reads of blocks that straddle tiles). Times: CUDA events, median over repeats.
// Prints a table; --json writes {"bytes", "ms", "tb_s", "copy_tb_s", "bandwidth_fraction",
// "backward": {...}, "jobs": {"fwd_q": {...}, ... one tensor's kernel alone}, "config": {...}}.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "common/layout.h"
#include "kernels/hopper/async_copy.cuh"
#include "kernels/quantize/element_convert.cuh"
#include "kernels/quantize/quantize.h"

namespace {

using flamia::bench::device_alloc;
using flamia::bench::kFillThreads;

constexpr int kFillBlocks = 4096;
constexpr double kBytesPerTB = 1e12;
constexpr double kMsPerS = 1e3;

// BF16 values with per-(token, head) magnitudes 2^-8..2^7: realistic spread, never NaN.
__global__ void fill_bf16(uint16_t* x, size_t n, int row, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = flamia::bench::element_hash(i, seed);
    uint32_t r = uint32_t(i / row) * 2246822519u ^ seed;
    r ^= r >> 13;
    const uint32_t exponent = 127 - 8 + (r % 16) + (h >> 28) % 2;
    x[i] = uint16_t((h & 0x8000u) | (exponent << 7) | (h & 0x7Fu));
  }
}

// softmax stats {M, l}: l in [1, 2^12), never 0.
__global__ void fill_stats(float* x, size_t rows) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < rows;
       i += size_t(gridDim.x) * blockDim.x) {
    x[2 * i] = float(i % 7);
    x[2 * i + 1] = 1.0f + float(i % 4093);
  }
}

// Speed-of-light probes of one row-major job's traffic (BF16 [token][head][128] -> FP8, a fixed
// factor instead of scales), with the quantize kernel's tile (128 tokens x one head, 256
// threads, a thread's 4 tokens x 16 channels): kStaged copies the tile into shared memory with
// cp.async and converts after one barrier (the quantize kernel's structure without its amax
// and exponent phases); otherwise each thread holds kTokens tokens' loads in registers.
constexpr int kSolHeadDim = 128;
constexpr int kSolThreads = 256;
constexpr int kSolTileTokens = 128;

template <bool kStaged, int kTokens>
__global__ void __launch_bounds__(kSolThreads)
    sol_convert_kernel(const uint16_t* x, uint8_t* out, int tokens, int heads) {
  using namespace flamia::quantize;
  constexpr int kVectors = kTokens * kChunkVectors;
  __shared__ uint4 stage[kStaged ? kVectors : 1][kSolThreads];
  const int tid = threadIdx.x;
  const int chunk = tid % 32 / 4;
  const int first = blockIdx.x * kSolTileTokens * kTokens / 4 + (tid / 32 * 4 + tid % 4) * kTokens;
  const int head = blockIdx.y;
  uint4 v[kVectors];
#pragma unroll
  for (int j = 0; j < kTokens; ++j) {
    const int token = first + j;
    const bool ok = token < tokens;
    const uint4* p = reinterpret_cast<const uint4*>(
        x + (int64_t(ok ? token : 0) * heads + head) * kSolHeadDim + chunk * kChunkChannels);
#pragma unroll
    for (int h = 0; h < kChunkVectors; ++h) {
      if constexpr (kStaged) {
        flamia::hopper::async_copy_16(&stage[j * kChunkVectors + h][tid], p + h, ok);
      } else {
        v[j * kChunkVectors + h] = __ldg(p + h);
      }
    }
  }
  if constexpr (kStaged) {
    flamia::hopper::async_copy_commit();
    flamia::hopper::async_copy_wait_all();
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kVectors; ++i) v[i] = stage[i][tid];
  }
#pragma unroll
  for (int j = 0; j < kTokens; ++j) {
    const int token = first + j;
    if (token >= tokens) continue;
    float f[kChunkChannels];
    unpack_chunk(Bf16Chunk{{v[j * kChunkVectors], v[j * kChunkVectors + 1]}}, f);
    uint32_t codes[kCodeWords];
    encode_chunk(f, 0.5f, codes);
    *reinterpret_cast<uint4*>(out + (int64_t(token) * heads + head) * kSolHeadDim +
                              chunk * kChunkChannels) =
        make_uint4(codes[0], codes[1], codes[2], codes[3]);
  }
}

template <bool kStaged, int kTokens>
void launch_sol(const uint16_t* x, uint8_t* out, int tokens, int heads, cudaStream_t stream) {
  const int tile = kSolTileTokens * kTokens / 4;
  const dim3 grid(unsigned((tokens + tile - 1) / tile), unsigned(heads));
  sol_convert_kernel<kStaged, kTokens><<<grid, kSolThreads, 0, stream>>>(x, out, tokens, heads);
}

struct Options {
  int tokens = 131072;
  int heads_q = 32;
  int heads_kv = 32;
  int head_dim = 128;
  int doc_length = 8192;
  flamia::ScaleMode mode = flamia::ScaleMode::kExact;
  flamia::KeySmoothing smoothing = flamia::KeySmoothing::kNone;
  int warmup = 3;
  int repeats = 20;
  std::string json;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto is = [&](const char* flag) { return !std::strcmp(argv[i], flag) && i + 1 < argc; };
    if (is("--tokens"))
      o.tokens = std::atoi(argv[++i]);
    else if (is("--heads-q"))
      o.heads_q = std::atoi(argv[++i]);
    else if (is("--heads-kv"))
      o.heads_kv = std::atoi(argv[++i]);
    else if (is("--head-dim"))
      o.head_dim = std::atoi(argv[++i]);
    else if (is("--doc-length"))
      o.doc_length = std::atoi(argv[++i]);
    else if (is("--warmup"))
      o.warmup = std::atoi(argv[++i]);
    else if (is("--repeats"))
      o.repeats = std::atoi(argv[++i]);
    else if (is("--json"))
      o.json = argv[++i];
    else if (is("--mode")) {
      o.mode = !std::strcmp(argv[++i], "block32") ? flamia::ScaleMode::kBlock32
                                                  : flamia::ScaleMode::kExact;
    } else if (is("--smoothing")) {
      const char* s = argv[++i];
      o.smoothing = !std::strcmp(s, "first")    ? flamia::KeySmoothing::kFirstKey
                    : !std::strcmp(s, "vector") ? flamia::KeySmoothing::kVector
                                                : flamia::KeySmoothing::kNone;
    } else {
      std::fprintf(stderr, "unknown or incomplete argument: %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

struct Result {
  double bytes = 0;
  double ms = 0;
  double tb_s() const { return bytes / (ms / kMsPerS) / kBytesPerTB; }
};

flamia::Fp8Copy fp8_copy(size_t value_bytes, int heads, int tokens) {
  return {device_alloc<uint8_t>(value_bytes), device_alloc<int8_t>(size_t(heads) * tokens)};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flamia;
  const Options o = parse(argc, argv);
  const int t = o.tokens, hq = o.heads_q, hkv = o.heads_kv, d = o.head_dim;
  const int doc = o.doc_length > 0 ? o.doc_length : t;

  std::vector<int32_t> cu = {0};
  while (cu.back() < t) cu.push_back(std::min(cu.back() + doc, t));
  int32_t* d_cu = device_alloc<int32_t>(cu.size());
  CHECK(cudaMemcpy(d_cu, cu.data(), cu.size() * sizeof(int32_t), cudaMemcpyHostToDevice));

  PackedShape shape;
  shape.cu_seqlens_q = shape.cu_seqlens_k = d_cu;
  shape.batch = int(cu.size()) - 1;
  shape.total_q = shape.total_k = t;
  shape.heads_q = hq;
  shape.heads_kv = hkv;
  shape.head_dim = d;
  shape.max_seqlen_q = shape.max_seqlen_k = std::min(doc, t);

  const size_t q_elems = size_t(t) * hq * d, kv_elems = size_t(t) * hkv * d;
  uint16_t* q = device_alloc<uint16_t>(q_elems);
  uint16_t* k = device_alloc<uint16_t>(kv_elems);
  uint16_t* v = device_alloc<uint16_t>(kv_elems);
  uint16_t* out = device_alloc<uint16_t>(q_elems);
  uint16_t* d_out = device_alloc<uint16_t>(q_elems);
  float* stats = device_alloc<float>(size_t(hq) * t * 2);
  float* vector = device_alloc<float>(size_t(hkv) * d);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(q, q_elems, d, 1u);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(k, kv_elems, d, 2u);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(v, kv_elems, d, 3u);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(out, q_elems, d, 4u);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(d_out, q_elems, d, 5u);
  fill_stats<<<kFillBlocks, kFillThreads>>>(stats, size_t(hq) * t);
  CHECK(cudaMemset(vector, 0, size_t(hkv) * d * sizeof(float)));
  CHECK(cudaGetLastError());

  const Bf16View q_view{q, int64_t(hq) * d, d}, k_view{k, int64_t(hkv) * d, d},
      v_view{v, int64_t(hkv) * d, d}, o_view{out, int64_t(hq) * d, d},
      d_o_view{d_out, int64_t(hq) * d, d};
  const bool smoothing = o.smoothing != KeySmoothing::kNone;
  const double exps_q = double(hq) * t, exps_kv = double(hkv) * t;

  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  // ---- forward ----
  QuantizeForwardArgs fwd;
  fwd.shape = shape;
  fwd.scale_mode = o.mode;
  fwd.key_smoothing = o.smoothing;
  fwd.key_smoothing_vector = vector;
  fwd.softmax_scale = 0.088f;
  fwd.q = q_view;
  fwd.k = k_view;
  fwd.v = v_view;
  fwd.out.q = fp8_copy(row_major_bytes(t, hq, d), hq, t);
  fwd.out.k = fp8_copy(row_major_bytes(t, hkv, d), hkv, t);
  fwd.out.v_t = fp8_copy(token_major_bytes(t, hkv, d), hkv, t);
  fwd.out.lse_shift = smoothing ? device_alloc<float>(size_t(hq) * t) : nullptr;
  Result forward;
  forward.bytes = 2.0 * (q_elems + 2.0 * kv_elems) + row_major_bytes(t, hq, d) +
                  row_major_bytes(t, hkv, d) + token_major_bytes(t, hkv, d) + exps_q + 2 * exps_kv +
                  (smoothing ? 4 * exps_q : 0);
  forward.ms = bench::median_ms(o.warmup, o.repeats, stream,
                                [&] { CHECK(launch_quantize_forward(fwd, stream)); });

  // ---- backward (with the forward's copies rebuilt in the same pass, as the C API runs it) ----
  QuantizeBackwardArgs bwd;
  bwd.shape = shape;
  bwd.scale_mode = o.mode;
  bwd.q = q_view;
  bwd.k = k_view;
  bwd.v = v_view;
  bwd.o = o_view;
  bwd.d_o = d_o_view;
  bwd.softmax_stats = stats;
  bwd.out.q_t = {device_alloc<uint8_t>(token_major_bytes(t, hq, d)), fwd.out.q.exponents};
  bwd.out.k_centered_t = fp8_copy(token_major_bytes(t, hkv, d), hkv, t);
  bwd.out.v = {device_alloc<uint8_t>(row_major_bytes(t, hkv, d)), fwd.out.v_t.exponents};
  bwd.out.d_o = fp8_copy(row_major_bytes(t, hq, d), hq, t);
  bwd.out.d_o_scaled_t = fp8_copy(token_major_bytes(t, hq, d), hq, t);
  bwd.out.delta = device_alloc<float>(size_t(hq) * t);
  bwd.fwd_out = fwd.out;
  bwd.fwd_out.lse_shift = nullptr;
  bwd.key_smoothing = o.smoothing;
  bwd.key_smoothing_vector = vector;
  const bool separate_k_hat = o.smoothing != KeySmoothing::kFirstKey;
  Result backward;
  backward.bytes = 2.0 * (3.0 * q_elems + 2.0 * kv_elems) + 8 * exps_q /* stats */ +
                   2.0 * token_major_bytes(t, hq, d) /* Q̂ᵀ, dO''ᵀ */ +
                   token_major_bytes(t, hkv, d) /* K̂cᵀ */ + 2.0 * row_major_bytes(t, hkv, d) +
                   2.0 * row_major_bytes(t, hq, d) /* V̂, K̂, dÔ, Q̂ */ +
                   token_major_bytes(t, hkv, d) /* V̂ᵀ */ + 3 * exps_q /* eq, edo, ew */ +
                   (separate_k_hat ? 3 : 2) * exps_kv /* ekc, ek, ev */ + 4 * exps_q /* delta */;
  backward.ms = bench::median_ms(o.warmup, o.repeats, stream,
                                 [&] { CHECK(launch_quantize_backward(bwd, stream)); });

  // ---- each tensor's job alone (the passes above launch one kernel per tensor) ----
  // Args with only one tensor's outputs set launch only that tensor's job.
  std::vector<std::pair<std::string, Result>> jobs;
  auto time_forward_job = [&](const char* name, double bytes, auto select) {
    QuantizeForwardArgs a = fwd;
    a.out = ForwardOperands{};
    select(a.out);
    jobs.push_back({name, {bytes, bench::median_ms(o.warmup, o.repeats, stream, [&] {
                             CHECK(launch_quantize_forward(a, stream));
                           })}});
  };
  auto time_backward_job = [&](const char* name, double bytes, auto select) {
    QuantizeBackwardArgs a = bwd;
    a.out = BackwardOperands{};
    a.fwd_out = ForwardOperands{};
    select(a.out, a.fwd_out);
    jobs.push_back({name, {bytes, bench::median_ms(o.warmup, o.repeats, stream, [&] {
                             CHECK(launch_quantize_backward(a, stream));
                           })}});
  };
  const double q_in = 2.0 * q_elems, kv_in = 2.0 * kv_elems;
  time_forward_job("fwd_q",
                   q_in + row_major_bytes(t, hq, d) + exps_q + (smoothing ? 4 * exps_q : 0),
                   [&](ForwardOperands& out) {
                     out.q = fwd.out.q;
                     out.lse_shift = fwd.out.lse_shift;
                   });
  time_forward_job("fwd_k", kv_in + row_major_bytes(t, hkv, d) + exps_kv,
                   [&](ForwardOperands& out) { out.k = fwd.out.k; });
  time_forward_job("fwd_v", kv_in + token_major_bytes(t, hkv, d) + exps_kv,
                   [&](ForwardOperands& out) { out.v_t = fwd.out.v_t; });
  time_backward_job("bwd_q",
                    q_in + token_major_bytes(t, hq, d) + row_major_bytes(t, hq, d) + exps_q,
                    [&](BackwardOperands& out, ForwardOperands& f) {
                      out.q_t = bwd.out.q_t;
                      f.q = bwd.fwd_out.q;
                    });
  time_backward_job("bwd_k",
                    kv_in + token_major_bytes(t, hkv, d) + row_major_bytes(t, hkv, d) +
                        (separate_k_hat ? 2 : 1) * exps_kv,
                    [&](BackwardOperands& out, ForwardOperands& f) {
                      out.k_centered_t = bwd.out.k_centered_t;
                      f.k = bwd.fwd_out.k;
                    });
  time_backward_job("bwd_v",
                    kv_in + row_major_bytes(t, hkv, d) + token_major_bytes(t, hkv, d) + exps_kv,
                    [&](BackwardOperands& out, ForwardOperands& f) {
                      out.v = bwd.out.v;
                      f.v_t = bwd.fwd_out.v_t;
                    });
  time_backward_job("bwd_do",
                    2 * q_in + 8 * exps_q + row_major_bytes(t, hq, d) +
                        token_major_bytes(t, hq, d) + 2 * exps_q + 4 * exps_q,
                    [&](BackwardOperands& out, ForwardOperands&) {
                      out.d_o = bwd.out.d_o;
                      out.d_o_scaled_t = bwd.out.d_o_scaled_t;
                      out.delta = bwd.out.delta;
                    });

  // ---- speed-of-light probes of the Q job's traffic (head dim 128 only) ----
  if (d == kSolHeadDim) {
    uint8_t* sol_out = fwd.out.q.values;
    const double bytes = q_in + row_major_bytes(t, hq, d);
    auto time_sol = [&](const char* name, auto launch) {
      jobs.push_back({name, {bytes, bench::median_ms(o.warmup, o.repeats, stream, [&] {
                               launch(q, sol_out, t, hq, stream);
                             })}});
    };
    time_sol("sol_staged4", launch_sol<true, 4>);
    time_sol("sol_regs4", launch_sol<false, 4>);
    time_sol("sol_regs8", launch_sol<false, 8>);
  }

  // ---- device-to-device copy of about 1 GiB, same run ----
  const size_t copy_bytes = q_elems * sizeof(uint16_t);
  Result copy;
  copy.bytes = 2.0 * copy_bytes;
  copy.ms = bench::median_ms(o.warmup, o.repeats, stream, [&] {
    CHECK(cudaMemcpyAsync(d_out, q, copy_bytes, cudaMemcpyDeviceToDevice, stream));
  });
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaGetLastError());

  const char* mode = o.mode == ScaleMode::kBlock32 ? "block32" : "exact";
  const char* smooth = o.smoothing == KeySmoothing::kFirstKey ? "first"
                       : o.smoothing == KeySmoothing::kVector ? "vector"
                                                              : "none";
  std::printf(
      "quantize pass: %d tokens (documents of %d), heads %d/%d, head dim %d, %s, "
      "smoothing %s\n",
      t, doc, hq, hkv, d, mode, smooth);
  std::printf("%-10s %12s %10s %8s %10s\n", "pass", "GB moved", "ms", "TB/s", "of copy");
  for (const auto& [name, r] : {std::pair<const char*, Result>{"forward", forward},
                                {"backward", backward},
                                {"d2d copy", copy}})
    std::printf("%-10s %12.3f %10.3f %8.3f %9.1f%%\n", name, r.bytes / 1e9, r.ms, r.tb_s(),
                100.0 * r.tb_s() / copy.tb_s());
  std::printf("one tensor's job alone:\n");
  for (const auto& [name, r] : jobs)
    std::printf("%-10s %12.3f %10.3f %8.3f %9.1f%%\n", name.c_str(), r.bytes / 1e9, r.ms, r.tb_s(),
                100.0 * r.tb_s() / copy.tb_s());

  if (!o.json.empty()) {
    std::string job_json;
    for (const auto& [name, r] : jobs) {
      char entry[256];
      std::snprintf(entry, sizeof(entry),
                    "%s\"%s\": {\"bytes\": %.0f, \"ms\": %.5f, \"tb_s\": %.5f, "
                    "\"bandwidth_fraction\": %.5f}",
                    job_json.empty() ? "" : ", ", name.c_str(), r.bytes, r.ms, r.tb_s(),
                    r.tb_s() / copy.tb_s());
      job_json += entry;
    }
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"bytes\": %.0f, \"ms\": %.5f, \"tb_s\": %.5f, \"copy_tb_s\": %.5f, "
                 "\"bandwidth_fraction\": %.5f,\n \"backward\": {\"bytes\": %.0f, \"ms\": %.5f, "
                 "\"tb_s\": %.5f, \"copy_tb_s\": %.5f, \"bandwidth_fraction\": %.5f},\n "
                 "\"jobs\": {%s},\n "
                 "\"config\": {\"tokens\": %d, \"doc_length\": %d, \"heads_q\": %d, "
                 "\"heads_kv\": %d, \"head_dim\": %d, \"scale_mode\": \"%s\", "
                 "\"key_smoothing\": \"%s\", \"repeats\": %d}}\n",
                 forward.bytes, forward.ms, forward.tb_s(), copy.tb_s(),
                 forward.tb_s() / copy.tb_s(), backward.bytes, backward.ms, backward.tb_s(),
                 copy.tb_s(), backward.tb_s() / copy.tb_s(), job_json.c_str(), t, doc, hq, hkv, d,
                 mode, smooth, o.repeats);
    std::fclose(f);
  }
  return 0;
}
