// Overlapping the forward's quantize pass (memory-bound) with its attention kernel (tensor-core
// bound): the KV heads split into equal chunks; chunk c + 1 is quantized on a low-priority
// stream while chunk c's attention runs on a high-priority one, whose persistent grid leaves a
// few SMs to the quantization. Every chunk computes exactly what the whole launch would (heads
// are independent), so the outputs are the same bits (tests/gpu/test_forward_overlap.cpp).
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "common/layout.h"

namespace flamia::api {

constexpr const char* kOverlapEnvironment = "FLAMIA_FORWARD_OVERLAP";
constexpr int kMaxOverlapChunks = 8;
constexpr int kAttentionStreams = 2;  // at most; chunk c's attention runs on c % streams

struct OverlapPlan {
  int chunks = 1;          // 1: no overlap (the quantize pass, then one attention launch)
  int attention_ctas = 0;  // CTAs of every attention launch but the last (0: one per SM)
  int attention_streams = kAttentionStreams;  // 2: a chunk's attention may start in the tail of
                                              // the one before; 1: after it
  bool overlapped() const { return chunks > 1; }
};

// How to split a forward of `shape` on a GPU of `multiprocessors` SMs (`keeps_operands`: a
// training forward, which writes the backward's copies too); `override_spec` is the
// FLAMIA_FORWARD_OVERLAP environment variable ("off", "auto" or null, or "CHUNKS:SMS[:STREAMS]"
// with SMS the SMs left to the quantization and STREAMS the attention streams, 1 or 2),
// validated by parse_overlap_override.
OverlapPlan plan_forward_overlap(const PackedShape& shape, int multiprocessors,
                                 const char* override_spec, bool keeps_operands = false);

// A FLAMIA_FORWARD_OVERLAP value: "off", the default plan ("auto", empty or unset: chunks 0),
// or "CHUNKS:SMS[:STREAMS]".
struct OverlapOverride {
  bool off = false;
  int chunks = 0;
  int sms = 0;
  int streams = kAttentionStreams;
};

// Whether `spec` is a valid FLAMIA_FORWARD_OVERLAP value, and then what it says in *out.
bool parse_overlap_override(const char* spec, OverlapOverride* out);

struct DeviceStreams;  // one device's internal streams and events (overlap.cpp)

// The current device's internal streams, locked for one call's launches: the quantize stream
// (lowest priority) and the attention streams (highest), each made to wait for the work the
// caller's stream holds when fork() runs; join() makes the caller's stream wait for theirs.
// Works under CUDA graph capture (the forked streams join the capture through the events).
class ForkedStreams {
 public:
  // Locks the device's streams (created on first use) until destruction; chunks' attention
  // alternates between `attention_streams` of them. *available is false (nothing forked, the
  // caller runs the plain path, the same bits) while the streams belong to a CUDA graph capture
  // other than `origin`'s (a capture holds the streams it took in until it ends, after the call
  // returns), or when they cannot be created.
  cudaError_t fork(cudaStream_t origin, int attention_streams, bool* available);
  cudaStream_t quantize() const;
  cudaStream_t attention(int chunk) const;
  // Chunk `chunk`'s attention stream waits for the quantize stream's work so far, and the
  // quantize stream's next work waits until that attention stream has got past the wait: the
  // next chunk's quantize CTAs are then queued after the attention's (which also have the
  // higher priority), so they take the SMs the attention leaves, not the attention's.
  cudaError_t hand_over(int chunk);
  // `origin` waits for every internal stream's work (also after a failed launch).
  cudaError_t join(cudaStream_t origin);

 private:
  std::unique_lock<std::mutex> lock_;  // of d_->mutex while forked
  DeviceStreams* d_ = nullptr;
  int streams_ = kAttentionStreams;
};

}  // namespace flamia::api
