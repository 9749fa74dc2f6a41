// Quantized operand layouts: what the quantize pass writes and the attention kernels read
// (docs/numerics.md §3), and where each lives in the caller's workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/fp8_numerics.h"

namespace flamia {

// The forward's softmax statistics per (query head, token): {M, l}.
constexpr int kSoftmaxStatsPerRow = 2;

// Sizes of a packed variable-length problem, as the kernels see them.
struct PackedShape {
  const int32_t* cu_seqlens_q = nullptr;  // device
  const int32_t* cu_seqlens_k = nullptr;  // device
  int batch = 0;
  int total_q = 0;
  int total_k = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  bool causal = false;
  int sliding_window = 0;  // 0: none; W: causal rows see their last W keys (flamia.h)
  int group_size() const { return heads_q / heads_kv; }  // query heads per KV head
};

// The KV heads [kv_begin, kv_begin + kv_count) and their query heads, for a launch that works
// on part of a problem's heads (the tensors keep the whole problem's layout and strides).
// kv_count 0: every head.
struct HeadRange {
  int kv_begin = 0;
  int kv_count = 0;
  bool whole() const { return kv_count == 0; }
  int kv_heads(const PackedShape& s) const { return whole() ? s.heads_kv : kv_count; }
  int q_begin(const PackedShape& s) const { return kv_begin * s.group_size(); }
  int q_heads(const PackedShape& s) const { return kv_heads(s) * s.group_size(); }
  bool fits(const PackedShape& s) const {
    return whole() || (kv_begin >= 0 && kv_count > 0 && kv_begin + kv_count <= s.heads_kv);
  }
};

// `p` moved by `elements`, unless it is null (an array not given: it stays null).
template <typename T>
T* advance(T* p, int64_t elements) {
  return p == nullptr ? p : p + elements;
}

// One FP8 copy of a (tokens, heads, D) tensor with its per-(head, token) int8 exponents.
struct Fp8Copy {
  uint8_t* values = nullptr;    // row-major [tokens][heads][D], or token-major [heads][D][pad16]
  int8_t* exponents = nullptr;  // [heads][tokens]
};

// The forward's operands.
struct ForwardOperands {
  Fp8Copy q;                   // row-major
  Fp8Copy k;                   // row-major, from k - m (key smoothing)
  Fp8Copy v_t;                 // token-major, permuted; exponents = ev
  float* lse_shift = nullptr;  // [heads_q][total_q]: softmax_scale * (q . m), or nullptr
};

// Scale mode kStatic: one caller-supplied exponent per KV head for K̂ and for V̂ (device,
// [heads_kv] each; both null in the other modes).
struct StaticExponents {
  const int8_t* key = nullptr;
  const int8_t* value = nullptr;
  bool enabled() const { return key != nullptr; }
};

// The backward's additional operands (the forward's are rebuilt by the same quantize pass).
struct BackwardOperands {
  Fp8Copy q_t;             // token-major, permuted (same exponents as q)
  Fp8Copy k_centered_t;    // token-major, natural order, from k - k_first(doc)
  Fp8Copy v;               // row-major (same exponents as v_t)
  Fp8Copy d_o;             // row-major, scale_mode blocks
  Fp8Copy d_o_scaled_t;    // dO fl(1/l), token-major, permuted, 64-query tile-aligned blocks
  float* delta = nullptr;  // D_i = 2^edo_i * (dÔ_i . O_i), [heads_q][total_q]
};

constexpr size_t kWorkspaceAlignment = 256;
inline size_t align_up(size_t bytes, size_t alignment = kWorkspaceAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// Carves aligned buffers out of one workspace. With base == nullptr it only measures.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(size_t count) {
    char* at = base_ ? base_ + used_ : nullptr;
    used_ += align_up(count * sizeof(T));
    return reinterpret_cast<T*>(at);
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

inline size_t row_major_bytes(int tokens, int heads, int head_dim) {
  return size_t(tokens) * heads * head_dim;
}
inline size_t token_major_bytes(int tokens, int heads, int head_dim) {
  return size_t(padded_tokens(tokens)) * heads * head_dim;
}

}  // namespace flamia
