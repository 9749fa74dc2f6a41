// What one launch of the quantize kernel does: one BF16 tensor (one read), up to two quantized
// copies of it (each with its own transform, scale blocks and layouts), and the per-token
// extras that need the same read (the LSE shift of key smoothing, the backward's delta).
// Plain data shared by the host-side job builders and the kernel (passed as a kernel argument).
#pragma once

#include <cstdint>

#include "common/views.h"

namespace flamia::quantize {

// ---- Tiling ----------------------------------------------------------------------------------
// A CTA owns kTileTokens consecutive tokens (a multiple of the permutation group, so that every
// token-major write is whole 16-byte groups) of one head, all head_dim channels.
constexpr int kTileTokens = 128;
// A thread holds kQuadTokens tokens x kChunkChannels channels: 4 x 32 bytes of BF16 in, 4 x 16
// bytes of FP8 out. The 4 tokens are the ones a permuted 32-bit word holds (see tile_geometry).
constexpr int kChunkChannels = 16;
constexpr int kQuadTokens = 4;
// Scale blocks that straddle the tile's ends are completed by reading the outside tokens (their
// amax only). 48 bounds both kinds: a block32 block reaches at most 31 tokens out, a 64-query
// tile-aligned block (starting at a multiple of 16 or at a document start) at most 48.
constexpr int kMaxHaloTokens = 48;
constexpr int kWindowTokens = kTileTokens + 2 * kMaxHaloTokens;
constexpr int kMaxCopies = 2;
constexpr int kMaxExponentOutputs = 2;
// cu_seqlens entries cached per CTA: enough for a tile of one-token documents (129 entries);
// many empty documents fall back to a binary search in global memory.
constexpr int kDocSliceCapacity = 256;
constexpr int kTileAlignedQueryBlock = 64;  // dO/l copy (numerics §2)

// ---- Copies ------------------------------------------------------------------------------------
enum class Transform : uint8_t {
  kIdentity = 0,
  kSubtractFirstKey = 1,  // x - x[first token of the document] (same tensor, same head)
  kSubtractVector = 2,    // x - shift_vector[head][:]
  kTimesInverseL = 3,     // x * fl(1/l) (0 where l = 0), l = softmax_stats[head][token][1]
};
enum class BlockKind : uint8_t {
  kToken = 0,    // one token (exact mode)
  kBlock32 = 1,  // document-local blocks of 32 tokens
  kTile64 = 2,   // [floor16(doc_start) + 64 n, ...) intersected with the document
};
enum class TokenOrder : uint8_t { kNatural = 0, kPermuted = 1 };

struct CopySpec {
  Transform transform = Transform::kIdentity;
  BlockKind blocks = BlockKind::kToken;
  TokenOrder order = TokenOrder::kPermuted;     // of the token-major copy
  uint8_t* row_major = nullptr;                 // [tokens][heads][D]
  uint8_t* token_major = nullptr;               // [heads][D][pad16(tokens)]
  int8_t* exponents[kMaxExponentOutputs] = {};  // [heads][tokens] each (same values)
  // Scale mode kStatic (K̂, V̂): the exponent of every token of head h is
  // static_scale_exponent(static_exponents[h]) instead of its block's amax rule.
  const int8_t* static_exponents = nullptr;  // device, [heads]
  // Optional: the copy's amax per head over all tokens (of what it quantizes, before the
  // scale), taken into FP32 [heads] by atomic maxima (the caller zeroes it).
  float* amax_out = nullptr;
};

struct TensorSource {
  const uint16_t* data = nullptr;  // BF16 bits
  int64_t token_stride = 0;        // elements
  int64_t head_stride = 0;
};

// softmax_scale * (q_i . m) for query tensors under key smoothing (numerics §4 step 7).
struct LseShiftSpec {
  float* out = nullptr;  // [heads][tokens]
  KeySmoothing source = KeySmoothing::kNone;
  TensorSource keys;  // kFirstKey: m = keys[cu_seqlens_k[doc]][head / group]
  const int32_t* cu_seqlens_k = nullptr;
  const float* vector = nullptr;  // kVector: m = vector[head / group][:]
  int kv_group = 1;
  float softmax_scale = 1.0f;
};

// D_i = 2^e0_i * sum_d decode(copy0_id) * O_id, copy 0 being dÔ (numerics §5 step 3).
struct DeltaSpec {
  float* out = nullptr;  // [heads][tokens]
  TensorSource o;
  bool from_input = false;  // D = dO . O from the BF16 dO (fp8-bf16grad), not from dÔ
};

// Rows of an FP32 buffer [heads][tokens][row_floats] that the job's CTAs set to zero for their
// (head, tokens): the backward's dQ buffer, zeroed by the dO job.
struct ZeroRowsSpec {
  float* base = nullptr;
  int row_floats = 0;  // a multiple of 4 (16-byte rows)
};

struct TensorJob {
  TensorSource x;
  const int32_t* cu_seqlens = nullptr;  // device, batch + 1 entries
  int batch = 0;
  int tokens = 0;
  int heads = 0;         // heads this job quantizes (CTAs: tiles x heads)
  int layout_heads = 0;  // heads of the row-major copies' layout (>= heads: a head range)
  int num_copies = 0;
  CopySpec copy[kMaxCopies];
  const float* shift_vector = nullptr;   // kSubtractVector: [heads][D]
  const float* softmax_stats = nullptr;  // kTimesInverseL: [heads][tokens][2]
  LseShiftSpec lse_shift;
  DeltaSpec delta;
  ZeroRowsSpec zero_rows;  // gradient kernel only
  // Read: a failed check earlier in the call stops the job. Written: an infinite token amax
  // records `infinite_status` (report_infinite_amax, scale_blocks.cuh).
  int32_t* device_status = nullptr;
  DeviceStatus infinite_status = kDeviceStatusOk;  // which tensor this job reads (the builder's)
  // Set by the builder: whether any part of the job depends on document bounds (a document-
  // local block, the first key, the LSE shift's key document). Exact-mode jobs skip the search.
  bool needs_documents = false;
  // Set by launch_tensor_jobs: in a launch of the general kernel, the job's CTAs run the
  // token-scale kernel's body (token_scale_kernel_takes, head dims 64 and 128).
  bool token_scale_path = false;
};

// One launch runs every job of one kernel instance (the forward's Q, K and V; the backward's
// Q, K, V and, in a second launch, dO): CTAs [cta_begin[n], cta_begin[n + 1]) do job n, one
// per (tile, head), tiles fastest. One grid instead of one per tensor: the jobs' tails and
// ramps overlap.
constexpr int kMaxJobsPerLaunch = 4;
struct JobBatch {
  TensorJob job[kMaxJobsPerLaunch];
  int cta_begin[kMaxJobsPerLaunch + 1] = {};
  int count = 0;
};

}  // namespace flamia::quantize
