#include "api/overlap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

namespace flamia::api {
namespace {

// The model behind the default plan (docs/architecture.md, "Overlapped quantization"), from
// session 31's sweeps on the H200 (bench/results/overlap): the attention runs at about
// kAttentionFlopsPerSecond and the quantize pass at kQuantizeBytesPerSecond on the whole GPU, but
// at only kQuantizeBytesPerSm on each SM it keeps beside the attention (its CTAs are issue-
// bound there: ~14-16 instructions per element, docs/results-log.md session 32). Overlap pays when
// the attention is at least kMinAttentionToQuantize times the pass; chunk c + 1's quantization
// should fit in chunk c's attention, which sets the SMs.
constexpr double kAttentionFlopsPerSecond = 800e12;
constexpr double kQuantizeBytesPerSecond = 3.4e12;
constexpr double kQuantizeBytesPerSm = 25e9;
constexpr double kMinAttentionToQuantize = 3.0;
constexpr int kMinQuantizeSms = 8;
constexpr int kMaxQuantizeSms = 24;
constexpr int kMaxQuantizeSmsDivisor = 4;  // default plans leave at least 3/4 to the attention
constexpr int kDefaultChunks = 4;
constexpr int kBytesPerQuantizedValue = 3;  // a BF16 read, an E4M3 write

int largest_divisor_at_most(int n, int limit) {
  for (int c = std::min(n, limit); c > 1; --c)
    if (n % c == 0) return c;
  return 1;
}

// A lower bound of the attention's FLOPs from what the host knows without the documents (the
// totals, the count and the longest): sum L^2 is at least total^2 / batch, and at least the
// longest document's square plus the rest spread evenly.
double estimated_flops(const PackedShape& s) {
  const double total = s.total_k, longest = s.max_seqlen_k, batch = std::max(s.batch, 1);
  double squares = total * total / batch;  // (a window lowers it further: below)
  if (s.batch > 1)
    squares =
        std::max(squares, longest * longest + (total - longest) * (total - longest) / (batch - 1));
  double scores = squares * s.total_q / std::max(total, 1.0) / (s.causal ? 2.0 : 1.0);
  if (s.sliding_window > 0) scores = std::min(scores, double(s.total_q) * s.sliding_window);
  constexpr double kFlopsPerScore = 4.0;  // Q.Kᵀ and P.V, a multiply-add each
  return kFlopsPerScore * s.heads_q * s.head_dim * scores;
}

double quantized_bytes(const PackedShape& s) {
  const double values =
      double(s.head_dim) * (double(s.total_q) * s.heads_q + 2.0 * double(s.total_k) * s.heads_kv);
  return values * kBytesPerQuantizedValue;
}

}  // namespace

// One device's internal streams and events, created at its first overlapped forward and kept for
// the process.
struct DeviceStreams {
  std::mutex mutex;
  cudaStream_t quantize = nullptr;
  cudaStream_t attention[kAttentionStreams] = {};
  cudaEvent_t fork_event = nullptr;
  cudaEvent_t chunk_events[kMaxOverlapChunks] = {};
  cudaEvent_t started_events[kMaxOverlapChunks] = {};
  cudaEvent_t join_events[kAttentionStreams + 1] = {};  // the attention streams', the quantize's
  bool ready = false;
};

namespace {

constexpr int kMaxDevices = 64;

cudaError_t create(DeviceStreams& d) {
  int least = 0, greatest = 0;
  cudaError_t err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (err != cudaSuccess) return err;
  err = cudaStreamCreateWithPriority(&d.quantize, cudaStreamNonBlocking, least);
  for (cudaStream_t& s : d.attention)
    if (err == cudaSuccess) err = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest);
  const unsigned flags = cudaEventDisableTiming;
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&d.fork_event, flags);
  for (cudaEvent_t& e : d.chunk_events)
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&e, flags);
  for (cudaEvent_t& e : d.started_events)
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&e, flags);
  for (cudaEvent_t& e : d.join_events)
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&e, flags);
  d.ready = err == cudaSuccess;
  return err;  // (a partial creation is retried at the next call; the handles live as long as the
               // process)
}

DeviceStreams* streams_of(int device) {
  static std::mutex table_mutex;
  static std::unique_ptr<DeviceStreams> table[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> guard(table_mutex);
  if (!table[device]) table[device] = std::make_unique<DeviceStreams>();
  return table[device].get();
}

}  // namespace

bool parse_overlap_override(const char* spec, OverlapOverride* out) {
  *out = OverlapOverride{};
  if (spec == nullptr || spec[0] == '\0' || std::strcmp(spec, "auto") == 0) return true;
  if (std::strcmp(spec, "off") == 0) {
    out->off = true;
    return true;
  }
  int c = 0, x = 0, s = kAttentionStreams, consumed = 0;
  if (std::sscanf(spec, "%d:%d%n", &c, &x, &consumed) != 2) return false;
  if (spec[consumed] == ':') {
    int more = 0;
    if (std::sscanf(spec + consumed, ":%d%n", &s, &more) != 1) return false;
    consumed += more;
  }
  if (spec[consumed] != '\0') return false;
  if (c < 1 || c > kMaxOverlapChunks || x < 1 || s < 1 || s > kAttentionStreams) return false;
  out->chunks = c;
  out->sms = x;
  out->streams = s;
  return true;
}

OverlapPlan plan_forward_overlap(const PackedShape& shape, int multiprocessors,
                                 const char* override_spec, bool keeps_operands) {
  OverlapPlan plan;
  OverlapOverride setting;
  if (!parse_overlap_override(override_spec, &setting) || setting.off) return plan;
  plan.attention_streams = setting.streams;
  int chunks = setting.chunks, sms = setting.sms;
  if (chunks == 0) {
    // A training forward's pass writes twice the bytes (the backward's copies too), and its
    // steps measured 0 to +4% slower overlapped (session 31): the default leaves it as it was.
    if (keeps_operands) return plan;
    const double attention = estimated_flops(shape) / kAttentionFlopsPerSecond;
    const double bytes = quantized_bytes(shape);
    if (attention < kMinAttentionToQuantize * bytes / kQuantizeBytesPerSecond) return plan;
    chunks = kDefaultChunks;
    sms = int(std::ceil(bytes / (attention * kQuantizeBytesPerSm)));
    sms = std::clamp(sms, kMinQuantizeSms, kMaxQuantizeSms);
    if (sms * kMaxQuantizeSmsDivisor > multiprocessors) return plan;  // a small GPU
  }
  plan.chunks = largest_divisor_at_most(shape.heads_kv, chunks);
  if (sms >= multiprocessors) return OverlapPlan{};
  plan.attention_ctas = multiprocessors - sms;
  return plan;
}

namespace {

// Whether `stream` may join `origin`'s work: it is in no capture, or in origin's.
bool joinable(cudaStream_t stream, cudaStreamCaptureStatus origin_status,
              unsigned long long origin_id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) return false;
  if (status == cudaStreamCaptureStatusNone) return true;
  return status == cudaStreamCaptureStatusActive &&
         origin_status == cudaStreamCaptureStatusActive && id == origin_id;
}

}  // namespace

cudaError_t ForkedStreams::fork(cudaStream_t origin, int attention_streams, bool* available) {
  *available = false;
  streams_ = std::clamp(attention_streams, 1, kAttentionStreams);
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  DeviceStreams* d = streams_of(device);
  if (d == nullptr) return cudaErrorInvalidDevice;
  lock_ = std::unique_lock<std::mutex>(d->mutex);
  if (!d->ready && create(*d) != cudaSuccess) {
    // (e.g. a first call inside a graph capture that forbids creating them): the plain path
    cudaGetLastError();
    lock_ = std::unique_lock<std::mutex>();
    return cudaSuccess;
  }
  cudaStreamCaptureStatus origin_status = cudaStreamCaptureStatusNone;
  unsigned long long origin_id = 0;
  err = cudaStreamGetCaptureInfo(origin, &origin_status, &origin_id);
  if (err != cudaSuccess) return err;
  bool free = joinable(d->quantize, origin_status, origin_id);
  for (int s = 0; s < streams_; ++s)
    free = free && joinable(d->attention[s], origin_status, origin_id);
  if (!free) {
    lock_ = std::unique_lock<std::mutex>();  // another capture holds them: the plain path
    return cudaSuccess;
  }
  d_ = d;
  *available = true;
  err = cudaEventRecord(d->fork_event, origin);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(d->quantize, d->fork_event, 0);
  for (int s = 0; s < streams_ && err == cudaSuccess; ++s)
    err = cudaStreamWaitEvent(d->attention[s], d->fork_event, 0);
  return err;
}

cudaStream_t ForkedStreams::quantize() const {
  return d_->quantize;
}

cudaStream_t ForkedStreams::attention(int chunk) const {
  return d_->attention[chunk % streams_];
}

cudaError_t ForkedStreams::hand_over(int chunk) {
  cudaEvent_t quantized = d_->chunk_events[chunk % kMaxOverlapChunks];
  cudaEvent_t started = d_->started_events[chunk % kMaxOverlapChunks];
  cudaError_t err = cudaEventRecord(quantized, quantize());
  if (err == cudaSuccess) err = cudaStreamWaitEvent(attention(chunk), quantized, 0);
  if (err == cudaSuccess) err = cudaEventRecord(started, attention(chunk));
  return err == cudaSuccess ? cudaStreamWaitEvent(quantize(), started, 0) : err;
}

cudaError_t ForkedStreams::join(cudaStream_t origin) {
  cudaError_t first = cudaSuccess;
  for (int s = 0; s <= streams_; ++s) {  // every attention stream, then the quantize stream
    cudaStream_t stream = s < streams_ ? attention(s) : quantize();
    cudaError_t err = cudaEventRecord(d_->join_events[s], stream);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(origin, d_->join_events[s], 0);
    if (first == cudaSuccess) first = err;
  }
  return first;
}

}  // namespace flamia::api
