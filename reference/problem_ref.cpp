// Problem construction and validation, and the reference's thread helper.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "reference/attention_internal.h"
#include "reference/attention_ref.h"

namespace flamia::ref {

Problem make_problem(const std::vector<int>& doc_lengths, int heads_q, int heads_kv, int head_dim,
                     bool causal, ScaleMode scale_mode) {
  Problem p;
  p.cu_seqlens_q.push_back(0);
  for (int length : doc_lengths) p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + length);
  p.cu_seqlens_k = p.cu_seqlens_q;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.softmax_scale = 1.0f / std::sqrt(float(head_dim));
  p.causal = causal;
  p.scale_mode = scale_mode;
  if (scale_mode == ScaleMode::kStatic) {  // room for |x| up to 448 * 2^-5 = 14
    p.static_key_exponents.assign(size_t(heads_kv), kDefaultStaticExponent);
    p.static_value_exponents.assign(size_t(heads_kv), kDefaultStaticExponent);
  }
  return p;
}

namespace {

void check(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("flamia::ref: " + message);
}

void check_seqlens(const std::vector<int32_t>& cu, const char* name) {
  check(cu.size() >= 2, std::string(name) + " needs at least 2 entries");
  check(cu.front() == 0, std::string(name) + " must start at 0");
  for (size_t b = 0; b + 1 < cu.size(); ++b)
    check(cu[b + 1] >= cu[b], std::string(name) + " must be non-decreasing");
}

}  // namespace

void validate(const Problem& p) {
  check_seqlens(p.cu_seqlens_q, "cu_seqlens_q");
  check_seqlens(p.cu_seqlens_k, "cu_seqlens_k");
  check(p.cu_seqlens_q.size() == p.cu_seqlens_k.size(), "cu_seqlens_q/k sizes differ");
  check(p.heads_q > 0 && p.heads_kv > 0 && p.heads_q % p.heads_kv == 0,
        "heads_q must be a positive multiple of heads_kv");
  check(p.head_dim > 0, "head_dim must be positive");
  check(p.score_format == ScoreFormat::kFp8 || p.head_dim % kNvfp4BlockElements == 0,
        "score_format nvfp4 needs a head_dim that is a multiple of 16 (its scale blocks)");
  check(std::isfinite(p.softmax_scale), "softmax_scale must be finite");
  if (p.causal) {
    for (int b = 0; b < p.batch(); ++b)
      check(p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] == p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b],
            "causal documents must have equal query and key lengths (unsupported otherwise)");
  }
  check(p.sliding_window >= 0, "sliding_window must not be negative");
  check(p.sliding_window == 0 || p.causal, "a sliding window needs causal documents");
  if (p.scale_mode == ScaleMode::kStatic)
    check(p.static_key_exponents.size() == size_t(p.heads_kv) &&
              p.static_value_exponents.size() == size_t(p.heads_kv),
          "scale_mode = static needs heads_kv key and value exponents");
  if (p.key_smoothing == KeySmoothing::kVector)
    check(p.smoothing_vector.size() == size_t(p.heads_kv) * p.head_dim,
          "key_smoothing = vector needs heads_kv * head_dim values");
}

std::vector<float> HostTensor::to_float() const {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

namespace internal {

void parallel_for(int count, const std::function<void(int)>& body) {
  int threads = int(std::thread::hardware_concurrency());
  if (const char* env = std::getenv("FLAMIA_REF_THREADS")) threads = std::atoi(env);
  threads = std::max(1, std::min(threads, count));
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int item = next++; item < count; item = next++) body(item);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& thread : pool) thread.join();
}

std::vector<RowChunk> row_chunks(const std::vector<int32_t>& cu_seqlens,
                                 const std::vector<int>& heads, int rows) {
  std::vector<RowChunk> chunks;
  for (int h : heads)
    for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b)
      for (int r = cu_seqlens[b]; r < cu_seqlens[b + 1]; r += rows)
        chunks.push_back({h, int(b), r, std::min(r + rows, int(cu_seqlens[b + 1]))});
  // Longest-first is unnecessary: chunks are small and pulled dynamically.
  return chunks;
}

std::vector<double> decode_head_major(const Fp8Tensor& x) {
  std::vector<double> out(size_t(x.heads) * x.tokens * x.dim);
  for (int t = 0; t < x.tokens; ++t)
    for (int h = 0; h < x.heads; ++h)
      for (int d = 0; d < x.dim; ++d)
        out[(size_t(h) * x.tokens + t) * x.dim + d] = e4m3_decode(x.value(t, h, d));
  return out;
}

std::vector<double> decode_head_major(const Nvfp4Tensor& x) {
  std::vector<double> out(size_t(x.heads) * x.tokens * x.dim);
  for (int t = 0; t < x.tokens; ++t)
    for (int h = 0; h < x.heads; ++h)
      for (int d = 0; d < x.dim; ++d)
        out[(size_t(h) * x.tokens + t) * x.dim + d] = x.block_value(t, h, d);
  return out;
}

}  // namespace internal
}  // namespace flamia::ref
