// Host-side argument validation (validation.h has the order of the checks).
#include "api/validation.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "api/dispatch.h"
#include "api/errors.h"
#include "api/memory_checks.h"
#include "api/overlap.h"
#include "api/saved_operands.h"
#include "api/seqlens_report.h"
#include "api/workspace.h"
#include "kernels/backward/backward.h"
#include "kernels/forward/forward.h"

namespace flamia::api {
namespace {

// cu_seqlens only need int32 alignment (the kernels read single entries), so slices of a larger
// cu_seqlens tensor stay usable.
constexpr size_t kSeqlensAlignment = alignof(int32_t);
// Head dims the API can describe; each is offered only when the kernels report support.
constexpr int kCandidateHeadDims[] = {64, 128, 256};
constexpr int kHeadDimNotYetImplemented = 256;
// Documents per call: the backward's packed runs index documents times 128 below its 2^30
// sentinels (packed_runs.h), and the schedules' loops step over batch in 32-bit counters.
constexpr int32_t kMaxBatch = 1 << 23;
// Tokens per side: padded to whole tiles (up to 256 more) the counts stay 32-bit.
constexpr int32_t kMaxTotalTokens = std::numeric_limits<int32_t>::max() - 256;
// Query heads: heads x head_dim (head dims up to 256) stays below 2^31, the range of the TMA
// coordinates and tensor-map rows of the [heads x head_dim][tokens] copies (V̂ᵀ in the forward,
// Q̂ᵀ and dO''ᵀ in the backward) and of the centred keys' loop; heads_kv <= heads_q follows.
constexpr int32_t kMaxHeadsQ = 1 << 22;
// Query rows (heads_q x total_q): the forward plan's work items (at most one per row) are
// counted and indexed in 32 bits, with the persistent grid's stride past the last. Beyond any
// GPU's memory anyway (O alone would take 256 GiB at head dim 64).
constexpr int64_t kMaxQueryRows = kMaxTotalTokens;

// The raw value of a C enum field: a C caller can store any int there, and C++ may assume an
// enum holds only its enumerators' range, so read the bytes instead of comparing the enum.
template <typename Enum>
int raw_enum(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized on supported ABIs");
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

flamia_status invalid(const char* where, const char* field, int value, const char* rule) {
  return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s (%d) %s", where, field, value, rule);
}

flamia_status check_sizes(const flamia_problem& p, const char* where) {
  if (p.batch < 1) return invalid(where, "problem.batch", p.batch, "must be at least 1");
  if (p.batch > kMaxBatch) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: problem.batch (%d) is above the %d documents one call supports (the "
                "kernels' packed document indices); split the batch",
                where, p.batch, kMaxBatch);
  }
  if (p.total_q < 0) {
    return invalid(where, "problem.total_q", p.total_q, "must not be negative (0: no queries)");
  }
  if (p.total_k < 0) {
    return invalid(where, "problem.total_k", p.total_k, "must not be negative (0: no keys)");
  }
  for (const auto& [field, total] :
       {std::pair{"problem.total_q", p.total_q}, std::pair{"problem.total_k", p.total_k}}) {
    if (total > kMaxTotalTokens) {
      return fail(FLAMIA_ERROR_UNSUPPORTED,
                  "%s: %s (%d) is above the %d tokens one call supports (token counts padded to "
                  "whole tiles stay 32-bit)",
                  where, field, total, kMaxTotalTokens);
    }
  }
  if (p.heads_q < 1) return invalid(where, "problem.heads_q", p.heads_q, "must be at least 1");
  if (p.heads_q > kMaxHeadsQ) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: problem.heads_q (%d) is above the %d query heads one call supports (heads x "
                "head_dim must stay 32-bit in the kernels' tensor-map coordinates)",
                where, p.heads_q, kMaxHeadsQ);
  }
  if (p.heads_kv < 1) return invalid(where, "problem.heads_kv", p.heads_kv, "must be at least 1");
  if (p.heads_q % p.heads_kv != 0) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: problem.heads_q (%d) must be a multiple of problem.heads_kv (%d) (GQA/MQA)",
                where, p.heads_q, p.heads_kv);
  }
  if (int64_t(p.heads_q) * p.total_q > kMaxQueryRows) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: problem.heads_q x problem.total_q (%d x %d = %lld query rows) is above the "
                "%lld one call supports (the forward's work items are counted in 32 bits); split "
                "the batch",
                where, p.heads_q, p.total_q, static_cast<long long>(int64_t(p.heads_q) * p.total_q),
                static_cast<long long>(kMaxQueryRows));
  }
  if (p.head_dim < 1) return invalid(where, "problem.head_dim", p.head_dim, "must be positive");
  if (p.max_seqlen_q < 1) {
    return invalid(where, "problem.max_seqlen_q", p.max_seqlen_q, "must be at least 1");
  }
  if (p.max_seqlen_k < 1) {
    return invalid(where, "problem.max_seqlen_k", p.max_seqlen_k, "must be at least 1");
  }
  return FLAMIA_OK;
}

flamia_status check_options(const flamia_problem& p, const char* where) {
  if (!std::isfinite(p.softmax_scale) || !(p.softmax_scale > 0.0f)) {
    return fail(
        FLAMIA_ERROR_INVALID_ARGUMENT,
        "%s: problem.softmax_scale (%g) must be finite and positive (e.g. 1/sqrt(head_dim))", where,
        double(p.softmax_scale));
  }
  if (p.causal != 0 && p.causal != 1) {
    return invalid(where, "problem.causal", p.causal, "must be 0 or 1");
  }
  const int scale_mode = raw_enum(p.scale_mode);
  if (scale_mode != FLAMIA_SCALE_EXACT && scale_mode != FLAMIA_SCALE_BLOCK32 &&
      scale_mode != FLAMIA_SCALE_STATIC) {
    return invalid(where, "problem.scale_mode", scale_mode,
                   "is not a flamia_scale_mode (FLAMIA_SCALE_EXACT, FLAMIA_SCALE_BLOCK32 or "
                   "FLAMIA_SCALE_STATIC)");
  }
  const bool wants_static = scale_mode == FLAMIA_SCALE_STATIC;
  const struct {
    const int8_t* array;
    const char* name;
  } static_arrays[] = {{p.static_key_exponents, "problem.static_key_exponents"},
                       {p.static_value_exponents, "problem.static_value_exponents"}};
  for (const auto& a : static_arrays) {
    if (wants_static && a.array == nullptr) {
      return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                  "%s: problem.scale_mode is FLAMIA_SCALE_STATIC but %s is NULL (needs a device "
                  "int8 array of heads_kv exponents)",
                  where, a.name);
    }
    if (!wants_static && a.array != nullptr) {
      return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                  "%s: %s is set but problem.scale_mode is not FLAMIA_SCALE_STATIC; the exponents "
                  "would be ignored",
                  where, a.name);
    }
  }
  if (p.sliding_window < 0) {
    return invalid(where, "problem.sliding_window", p.sliding_window,
                   "must not be negative (0: no window; W: each query sees its last W keys)");
  }
  if (p.sliding_window > 0 && p.causal == 0) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: problem.sliding_window (%d) without causal is not supported: the window "
                "is causal (FlashAttention's window_size = (W - 1, 0)); set causal = 1",
                where, p.sliding_window);
  }
  const int smoothing = raw_enum(p.key_smoothing);
  if (smoothing != FLAMIA_SMOOTH_NONE && smoothing != FLAMIA_SMOOTH_FIRST_KEY &&
      smoothing != FLAMIA_SMOOTH_VECTOR) {
    return invalid(where, "problem.key_smoothing", smoothing,
                   "is not a flamia_key_smoothing (NONE, FIRST_KEY or VECTOR)");
  }
  return FLAMIA_OK;
}

flamia_status check_backward_options(const flamia_backward_args& a, const char* where) {
  const int precision = raw_enum(a.precision);
  if (precision != FLAMIA_PRECISION_FP8 && precision != FLAMIA_PRECISION_FP8_BF16GRAD) {
    return invalid(where, "precision", precision,
                   "is not a flamia_precision (FLAMIA_PRECISION_FP8 or "
                   "FLAMIA_PRECISION_FP8_BF16GRAD)");
  }
  if (a.deterministic != 0 && a.deterministic != 1) {
    return invalid(where, "deterministic", a.deterministic, "must be 0 or 1");
  }
  return FLAMIA_OK;
}

flamia_status check_head_dim_supported(int head_dim, bool (*kernel_supports)(int),
                                       const char* kernel, const char* where) {
  bool candidate = false;
  char supported[64] = "";  // "64, 128"
  size_t length = 0;
  for (int d : kCandidateHeadDims) {
    candidate = candidate || d == head_dim;
    if (kernel_supports(d)) {
      length += size_t(std::snprintf(supported + length, sizeof supported - length, "%s%d",
                                     length == 0 ? "" : ", ", d));
    }
  }
  if (candidate && kernel_supports(head_dim)) return FLAMIA_OK;
  const char* list = length == 0 ? "none" : supported;
  if (head_dim == kHeadDimNotYetImplemented) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: problem.head_dim 256 is not supported yet: the %s kernels implement head "
                "dims %s",
                where, kernel, list);
  }
  return fail(FLAMIA_ERROR_UNSUPPORTED,
              "%s: problem.head_dim %d is not supported: the %s kernels implement head dims %s",
              where, head_dim, kernel, list);
}

flamia_status check_causal_totals(const flamia_problem& p, const char* where) {
  if (p.causal != 0 && p.total_q != p.total_k) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: causal attention with problem.total_q (%d) != problem.total_k (%d) is not "
                "supported: every causal document needs equal query and key lengths",
                where, p.total_q, p.total_k);
  }
  return FLAMIA_OK;
}

flamia_status check_seqlens_pointer(const int32_t* pointer, const char* name, bool required,
                                    const char* where) {
  if (pointer == nullptr) {
    if (!required) return FLAMIA_OK;
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: %s is NULL (a device array of problem.batch + 1 int32)", where, name);
  }
  if (!is_aligned(pointer, kSeqlensAlignment)) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s (%p) must be %zu-byte aligned (int32)",
                where, name, static_cast<const void*>(pointer), kSeqlensAlignment);
  }
  return FLAMIA_OK;
}

flamia_status check_problem_pointers(const flamia_problem& p, const char* where) {
  flamia_status status = check_seqlens_pointer(p.cu_seqlens_q, "problem.cu_seqlens_q", true, where);
  if (status == FLAMIA_OK) {
    status = check_seqlens_pointer(p.cu_seqlens_k, "problem.cu_seqlens_k", true, where);
  }
  if (status == FLAMIA_OK) {
    status = check_seqlens_pointer(p.host_cu_seqlens_q, "problem.host_cu_seqlens_q", false, where);
  }
  if (status == FLAMIA_OK) {
    status = check_seqlens_pointer(p.host_cu_seqlens_k, "problem.host_cu_seqlens_k", false, where);
  }
  if (status != FLAMIA_OK) return status;

  const bool wants_vector = raw_enum(p.key_smoothing) == FLAMIA_SMOOTH_VECTOR;
  if (wants_vector && p.key_smoothing_vector == nullptr) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: problem.key_smoothing is FLAMIA_SMOOTH_VECTOR but "
                "problem.key_smoothing_vector is NULL (needs a device (heads_kv, head_dim) FP32 "
                "array)",
                where);
  }
  if (!wants_vector && p.key_smoothing_vector != nullptr) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: problem.key_smoothing_vector is set but problem.key_smoothing is not "
                "FLAMIA_SMOOTH_VECTOR; the vector would be ignored",
                where);
  }
  if (wants_vector && !is_aligned(p.key_smoothing_vector, kTensorAlignment)) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: problem.key_smoothing_vector (%p) must be %zu-byte aligned", where,
                static_cast<const void*>(p.key_smoothing_vector), kTensorAlignment);
  }
  return FLAMIA_OK;
}

flamia_status check_host_seqlens(const flamia_problem& p, const char* where) {
  const int32_t* host_q = p.host_cu_seqlens_q;
  const int32_t* host_k = p.host_cu_seqlens_k;
  if (host_q == nullptr && host_k == nullptr) return FLAMIA_OK;
  const SeqlensLimits limits = seqlens_limits(p);
  ViolationKey first = kNoViolation;
  if (host_q != nullptr) {
    first = first_violation(first, check_seqlens_ends(host_q, kSeqlensQ, p.batch, p.total_q));
  }
  if (host_k != nullptr) {
    first = first_violation(first, check_seqlens_ends(host_k, kSeqlensK, p.batch, p.total_k));
  }
  for (int32_t doc = 0; doc < p.batch; ++doc) {
    first = first_violation(first, check_seqlens_document(host_q, host_k, doc, limits));
  }
  if (first == kNoViolation) return FLAMIA_OK;
  return fail_seqlens(where, describe_violation(first, host_q, host_k, limits),
                      "problem.host_cu_seqlens_q", "problem.host_cu_seqlens_k");
}

int64_t rows(const flamia_problem& p) {
  return int64_t(p.heads_q) * p.total_q;
}

// kv_amax comes from the quantize pass, which a forward without queries does not run.
flamia_status check_forward_kv_amax(const flamia_forward_args& a, const char* where) {
  if (a.kv_amax == nullptr || a.problem.total_q > 0 || a.problem.total_k == 0) return FLAMIA_OK;
  return fail(FLAMIA_ERROR_UNSUPPORTED,
              "%s: kv_amax with keys but no queries (total_q = 0, total_k = %d) is not supported: "
              "the amax comes from the quantize pass, which a forward without queries does not "
              "run (pass kv_amax = NULL)",
              where, a.problem.total_k);
}

flamia_status check_forward_quantize(const flamia_forward_args& a, const char* where) {
  const int quantize = raw_enum(a.quantize);
  if (quantize != FLAMIA_QUANTIZE_AUTO && quantize != FLAMIA_QUANTIZE_SEPARATE &&
      quantize != FLAMIA_QUANTIZE_FUSED) {
    return invalid(where, "quantize", quantize,
                   "is not a flamia_forward_quantize (AUTO, SEPARATE or FUSED)");
  }
  if (quantize == FLAMIA_QUANTIZE_FUSED &&
      raw_enum(a.problem.key_smoothing) != FLAMIA_SMOOTH_NONE) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: quantize = FLAMIA_QUANTIZE_FUSED with key smoothing is not supported: the "
                "fused quantization has no key smoothing (use AUTO or SEPARATE)",
                where);
  }
  if (quantize == FLAMIA_QUANTIZE_FUSED && raw_enum(a.problem.scale_mode) == FLAMIA_SCALE_STATIC) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: quantize = FLAMIA_QUANTIZE_FUSED with FLAMIA_SCALE_STATIC is not supported "
                "(use AUTO or SEPARATE)",
                where);
  }
  if (quantize == FLAMIA_QUANTIZE_FUSED && a.kv_amax != nullptr) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: quantize = FLAMIA_QUANTIZE_FUSED with kv_amax is not supported: the fused "
                "quantization writes no amax (use AUTO or SEPARATE)",
                where);
  }
  if (quantize == FLAMIA_QUANTIZE_FUSED && a.problem.sliding_window > 0) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: quantize = FLAMIA_QUANTIZE_FUSED with a sliding window is not supported "
                "(use AUTO or SEPARATE)",
                where);
  }
  if (quantize == FLAMIA_QUANTIZE_FUSED && !forward_supports_fused_quantize(a.problem.head_dim)) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: quantize = FLAMIA_QUANTIZE_FUSED with problem.head_dim %d is not supported: "
                "the fused quantization has a kernel for head dim 128 only (use AUTO or SEPARATE)",
                where, a.problem.head_dim);
  }
  return FLAMIA_OK;
}

// The optional saved-operands buffer: 256-byte aligned, at least flamia_saved_operands_size.
flamia_status check_saved_operands(const void* saved, size_t bytes, const flamia_problem& p,
                                   const char* where) {
  if (saved == nullptr) return FLAMIA_OK;
  if (!is_aligned(saved, kWorkspaceAlignment)) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: saved_operands (%p) must be %zu-byte aligned",
                where, saved, kWorkspaceAlignment);
  }
  const size_t required = layout_saved_operands(packed_shape(p), nullptr).bytes;
  if (bytes < required) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: saved_operands_bytes (%zu) is less than this problem needs (%zu, ask "
                "flamia_saved_operands_size)",
                where, bytes, required);
  }
  return FLAMIA_OK;
}

// The saved-operands buffer and the workspace, as far as this problem uses them, are apart: the
// forward writes both, and the backward writes its workspace while it reads the saved operands.
flamia_status check_saved_operands_apart(const void* saved, const flamia_problem& p,
                                         const void* workspace, size_t workspace_used,
                                         const char* where) {
  if (saved == nullptr) return FLAMIA_OK;
  const size_t saved_used = layout_saved_operands(packed_shape(p), nullptr).bytes;
  const auto s = reinterpret_cast<uintptr_t>(saved);
  const auto w = reinterpret_cast<uintptr_t>(workspace);
  if (s >= w ? s - w >= workspace_used : w - s >= saved_used) return FLAMIA_OK;
  return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
              "%s: saved_operands (%p, %zu bytes used) overlaps the workspace (%p, %zu bytes "
              "used); pass two separate buffers",
              where, saved, saved_used, workspace, workspace_used);
}

flamia_status check_forward_saved_operands(const flamia_forward_args& a, const char* where) {
  if (a.saved_operands != nullptr && raw_enum(a.quantize) == FLAMIA_QUANTIZE_FUSED) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: saved_operands with quantize = FLAMIA_QUANTIZE_FUSED is not supported: the "
                "fused quantization writes no copies to keep (use AUTO or SEPARATE)",
                where);
  }
  return FLAMIA_OK;
}

flamia_status check_backward_saved_operands(const flamia_backward_args& a, const char* where) {
  if (a.saved_operands != nullptr && raw_enum(a.precision) != FLAMIA_PRECISION_FP8) {
    return fail(FLAMIA_ERROR_UNSUPPORTED,
                "%s: saved_operands with precision FLAMIA_PRECISION_FP8_BF16GRAD is not "
                "supported: its products read the BF16 q, k and v (pass NULL)",
                where);
  }
  return FLAMIA_OK;
}

}  // namespace

flamia_status validate_saved_operands_problem(const flamia_problem& p, const char* where) {
  flamia_status status = check_sizes(p, where);
  if (status == FLAMIA_OK) {
    status = check_head_dim_supported(p.head_dim, backward_supports_head_dim, "backward", where);
  }
  return status;
}

flamia_status validate_forward_problem(const flamia_forward_args& a, const char* where) {
  const flamia_problem& p = a.problem;
  flamia_status status = check_sizes(p, where);
  if (status == FLAMIA_OK) status = check_options(p, where);
  // The head dim first: the quantize path's messages suggest AUTO, which would not help.
  if (status == FLAMIA_OK) {
    status = check_head_dim_supported(p.head_dim, forward_supports_head_dim, "forward", where);
  }
  if (status == FLAMIA_OK) status = check_forward_quantize(a, where);
  if (status == FLAMIA_OK) status = check_forward_saved_operands(a, where);
  if (status == FLAMIA_OK) status = check_forward_kv_amax(a, where);
  if (status == FLAMIA_OK) status = check_causal_totals(p, where);
  return status;
}

flamia_status validate_backward_problem(const flamia_backward_args& a, const char* where) {
  const flamia_problem& p = a.problem;
  flamia_status status = check_sizes(p, where);
  if (status == FLAMIA_OK) status = check_options(p, where);
  if (status == FLAMIA_OK) status = check_backward_options(a, where);
  if (status == FLAMIA_OK) status = check_backward_saved_operands(a, where);
  if (status == FLAMIA_OK) {
    status = check_head_dim_supported(p.head_dim, backward_supports_head_dim, "backward", where);
  }
  if (status == FLAMIA_OK) status = check_causal_totals(p, where);
  if (status == FLAMIA_OK) {
    if (const char* limit = backward_launch_limit(packed_shape(p))) {
      return fail(FLAMIA_ERROR_UNSUPPORTED,
                  "%s: the backward cannot launch this problem (batch %d, max_seqlen_k %d, "
                  "heads_kv %d): %s; pass the longest document's length as max_seqlen_k, or "
                  "split the batch",
                  where, p.batch, p.max_seqlen_k, p.heads_kv, limit);
    }
  }
  return status;
}

// FLAMIA_FORWARD_OVERLAP, read by every forward call (overlap.h): a bad value is an error, not a
// silent default.
flamia_status check_overlap_environment(const char* where) {
  const char* spec = std::getenv(kOverlapEnvironment);
  OverlapOverride setting;
  if (parse_overlap_override(spec, &setting)) return FLAMIA_OK;
  return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
              "%s: %s=\"%s\" is not off, auto or CHUNKS:SMS[:STREAMS] (CHUNKS 1..%d, SMS >= 1, "
              "STREAMS 1..%d)",
              where, kOverlapEnvironment, spec, kMaxOverlapChunks, kAttentionStreams);
}

flamia_status validate_forward_args(const flamia_forward_args* args, const char* where) {
  if (args == nullptr) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: args is NULL", where);
  const flamia_forward_args& a = *args;
  const flamia_problem& p = a.problem;
  flamia_status status = validate_forward_problem(a, where);
  if (status == FLAMIA_OK) status = check_problem_pointers(p, where);
  if (status == FLAMIA_OK) {
    status = check_tensors({{&a.q, {"q", p.total_q, p.heads_q, false}},
                            {&a.k, {"k", p.total_k, p.heads_kv, false}},
                            {&a.v, {"v", p.total_k, p.heads_kv, false}},
                            {&a.o, {"o", p.total_q, p.heads_q, true}}},
                           p.head_dim, where);
  }
  if (status == FLAMIA_OK) {
    status = check_floats(a.lse, rows(p), true, "lse", "FP32 (heads_q, total_q) output", where);
  }
  if (status == FLAMIA_OK) {
    status = check_floats(a.softmax_stats, rows(p) * kSoftmaxStatsPerRow, false, "softmax_stats",
                          "optional", where);
  }
  if (status == FLAMIA_OK) {
    status = check_floats(a.kv_amax, kv_amax_count(p), false, "kv_amax",
                          "optional FP32 (2, heads_kv) output", where);
  }
  if (status == FLAMIA_OK) {
    status = check_saved_operands(a.saved_operands, a.saved_operands_bytes, p, where);
  }
  size_t required = 0;  // the workspace bytes this problem uses
  if (status == FLAMIA_OK) {
    required = layout_workspace(forward_workspace_request(a), nullptr).bytes;
    status = check_workspace(a.workspace, a.workspace_bytes, required,
                             "flamia_forward_workspace_size", where);
  }
  if (status == FLAMIA_OK) {
    status = check_saved_operands_apart(a.saved_operands, p, a.workspace, required, where);
  }
  if (status == FLAMIA_OK) status = check_host_seqlens(p, where);
  if (status == FLAMIA_OK) status = check_overlap_environment(where);
  return status;
}

flamia_status validate_backward_args(const flamia_backward_args* args, const char* where) {
  if (args == nullptr) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: args is NULL", where);
  const flamia_backward_args& a = *args;
  const flamia_problem& p = a.problem;
  flamia_status status = validate_backward_problem(a, where);
  if (status == FLAMIA_OK) status = check_problem_pointers(p, where);
  // With saved operands q, k and v are not read (flamia.h).
  if (status == FLAMIA_OK && a.saved_operands == nullptr) {
    status = check_tensors({{&a.q, {"q", p.total_q, p.heads_q, false}},
                            {&a.k, {"k", p.total_k, p.heads_kv, false}},
                            {&a.v, {"v", p.total_k, p.heads_kv, false}}},
                           p.head_dim, where);
  }
  if (status == FLAMIA_OK) {
    status = check_tensors({{&a.o, {"o", p.total_q, p.heads_q, false}},
                            {&a.d_o, {"d_o", p.total_q, p.heads_q, false}},
                            {&a.dq, {"dq", p.total_q, p.heads_q, true}},
                            {&a.dk, {"dk", p.total_k, p.heads_kv, true}},
                            {&a.dv, {"dv", p.total_k, p.heads_kv, true}}},
                           p.head_dim, where);
  }
  // lse is not read: the backward takes M and l from softmax_stats.
  if (status == FLAMIA_OK) {
    status = check_floats(a.softmax_stats, rows(p) * kSoftmaxStatsPerRow, true, "softmax_stats",
                          "the backward needs the forward's {M, l}: pass softmax_stats to "
                          "flamia_forward",
                          where);
  }
  if (status == FLAMIA_OK) {
    status = check_saved_operands(a.saved_operands, a.saved_operands_bytes, p, where);
  }
  size_t required = 0;  // the workspace bytes this problem uses
  if (status == FLAMIA_OK) {
    required = layout_workspace(backward_workspace_request(a), nullptr).bytes;
    status = check_workspace(a.workspace, a.workspace_bytes, required,
                             "flamia_backward_workspace_size", where);
  }
  if (status == FLAMIA_OK) {
    status = check_saved_operands_apart(a.saved_operands, p, a.workspace, required, where);
  }
  if (status == FLAMIA_OK) status = check_host_seqlens(p, where);
  return status;
}

}  // namespace flamia::api
