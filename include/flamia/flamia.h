/* flamia: causally safe, microscaled FP8 attention for training (forward and backward).
 *
 * The C API of the framework-free core. Tensors are packed variable-length documents in the
 * FlashAttention varlen layout: (total_tokens, heads, head_dim), the last dimension contiguous,
 * token and head strides in elements. Documents are delimited by int32 cu_seqlens arrays of
 * length batch + 1 that live on the device. Every call runs on the caller's CUDA stream and uses
 * only the caller's workspace (query its size first), so calls can be captured in CUDA graphs.
 *
 * Numerics: docs/numerics.md. Architecture: docs/architecture.md. */
#ifndef FLAMIA_FLAMIA_H_
#define FLAMIA_FLAMIA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum flamia_status {
  FLAMIA_OK = 0,
  FLAMIA_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, bad size, stride or alignment */
  FLAMIA_ERROR_UNSUPPORTED = 2,      /* a valid request flamia does not implement (e.g. head dim) */
  FLAMIA_ERROR_WORKSPACE = 3,        /* workspace missing, too small or misaligned */
  FLAMIA_ERROR_CUDA = 4,             /* a CUDA call failed; the message names it */
  FLAMIA_ERROR_INVALID_SEQLENS = 5,  /* cu_seqlens contents invalid (found on host or device) */
  FLAMIA_ERROR_NO_DEVICE = 6         /* no sm_90 GPU for a GPU entry point */
} flamia_status;

typedef enum flamia_scale_mode {
  FLAMIA_SCALE_EXACT = 0,   /* one power-of-two scale per (token, head): exactly causal */
  FLAMIA_SCALE_BLOCK32 = 1, /* one per document-local block of 32 tokens (the MX layout) */
  FLAMIA_SCALE_STATIC = 2   /* Q per token as EXACT; K and V one caller-supplied power-of-two
                               scale per KV head (problem.static_*_exponents): exactly causal,
                               values beyond 448 * 2^e saturate; the fastest forward */
} flamia_scale_mode;

typedef enum flamia_precision {
  FLAMIA_PRECISION_FP8 = 0,         /* all five backward products in FP8 */
  FLAMIA_PRECISION_FP8_BF16GRAD = 1 /* dP, dQ and dK in BF16 (more accurate backward) */
} flamia_precision;

typedef enum flamia_key_smoothing {
  FLAMIA_SMOOTH_NONE = 0,
  FLAMIA_SMOOTH_FIRST_KEY = 1, /* subtract each document's first key (causal-safe) */
  FLAMIA_SMOOTH_VECTOR = 2     /* subtract a caller-supplied vector per KV head */
} flamia_key_smoothing;

/* Where the forward quantizes Q, K and V. The E4M3 bytes and exponents are the same either way
 * (docs/numerics.md §3), and so are the outputs, bit for bit. */
typedef enum flamia_forward_quantize {
  FLAMIA_QUANTIZE_AUTO = 0,     /* the faster path measured: SEPARATE on every shape so far */
  FLAMIA_QUANTIZE_SEPARATE = 1, /* a quantize pass over the whole tensors, then the attention */
  FLAMIA_QUANTIZE_FUSED = 2     /* inside the attention kernel, per tile (head dim 128; no key
                                   smoothing, SCALE_STATIC or sliding window; else
                                   FLAMIA_ERROR_UNSUPPORTED) */
} flamia_forward_quantize;

/* A (tokens, heads, head_dim) tensor; strides in elements, head_dim contiguous. */
typedef struct flamia_tensor {
  void* data;
  int64_t token_stride;
  int64_t head_stride;
} flamia_tensor;

/* Problem description shared by the forward and the backward. */
typedef struct flamia_problem {
  const int32_t* cu_seqlens_q;      /* device, batch + 1 entries */
  const int32_t* cu_seqlens_k;      /* device, batch + 1 entries */
  const int32_t* host_cu_seqlens_q; /* optional host copies: checked on the host when given */
  const int32_t* host_cu_seqlens_k;
  int32_t batch;   /* documents, 1 .. 2^23 */
  int32_t total_q; /* tokens, 0 .. 2^31 - 257 (likewise total_k) */
  int32_t total_k;
  int32_t heads_q;  /* 1 .. 2^22; heads_q * total_q at most 2^31 - 257 query rows */
  int32_t heads_kv; /* heads_q must be a multiple (GQA/MQA) */
  int32_t head_dim; /* 64 or 128 */
  int32_t max_seqlen_q;
  int32_t max_seqlen_k;
  float softmax_scale; /* e.g. 1/sqrt(head_dim) */
  int32_t causal;      /* each causal document needs equal q and k lengths: total_q != total_k
                          is UNSUPPORTED; a document's lengths differing, INVALID_SEQLENS */
  flamia_scale_mode scale_mode;
  flamia_key_smoothing key_smoothing;
  const float* key_smoothing_vector; /* device, (heads_kv, head_dim) FP32, for SMOOTH_VECTOR */
  /* Sliding window, causal only: 0 = none (zero-initialised problems have none); W >= 1: query
   * i sees the W keys of its document at local positions [i - W + 1, i] (those that exist).
   * FlashAttention's window_size = (left, 0) is W = left + 1. W >= max_seqlen_k is no window
   * (the same results) and runs as none. */
  int32_t sliding_window;
  /* SCALE_STATIC only (NULL otherwise): device int8 arrays of heads_kv exponents, K̂ = e4m3((k -
   * m) * 2^-e) and V̂ = e4m3(v * 2^-e) with satfinite rounding; an exponent below -126 counts as
   * -126. E.g. from the previous step's amax of the head (delayed scaling). The backward of a
   * forward takes the same exponents (it quantizes K and V again unless given saved operands). */
  const int8_t* static_key_exponents;
  const int8_t* static_value_exponents;
} flamia_problem;

typedef struct flamia_forward_args {
  flamia_problem problem;
  flamia_tensor q, k, v; /* BF16 inputs */
  flamia_tensor o;       /* BF16 output (total_q, heads_q, head_dim) */
  float* lse;            /* FP32 (heads_q, total_q), natural log; -inf for fully masked rows */
  float* softmax_stats;  /* FP32 (heads_q, total_q, 2): {M, l} for the backward; may be NULL */
  void* workspace;
  size_t workspace_bytes;
  void* stream;                     /* cudaStream_t; NULL = default stream */
  flamia_forward_quantize quantize; /* AUTO (0) unless measuring one path */
  /* Optional (NULL: not kept): a buffer of flamia_saved_operands_size bytes, 256-byte aligned,
   * where the forward keeps its quantized Q, K, V in every layout the FP8 backward reads. A
   * backward given it reads no q, k, v and skips their quantization. Not with FUSED; apart from
   * the workspace. */
  void* saved_operands;
  size_t saved_operands_bytes;
  /* Optional (NULL: not written): device FP32 (2, heads_kv), 16-byte aligned. Row 0: each KV
   * head's max |k - m| over all tokens (the keys as quantized: m is the key smoothing's vector
   * or first key, 0 without smoothing), row 1: its max |v|; from the same read as the quantize
   * pass (amax outputs, e.g. the next step's SCALE_STATIC exponents: flamia's delayed scaling).
   * 0 without keys; NaNs are ignored, as the scale rule ignores them. Not with FUSED, nor with
   * keys but no queries (total_q = 0: UNSUPPORTED). */
  float* kv_amax;
} flamia_forward_args;

typedef struct flamia_backward_args {
  flamia_problem problem;
  flamia_tensor q, k, v, o, d_o; /* BF16: the forward's inputs and output, and dL/dO */
  const float* lse;              /* from the forward */
  const float* softmax_stats;    /* from the forward (required) */
  flamia_tensor dq, dk, dv;      /* BF16 outputs */
  flamia_precision precision;
  int32_t deterministic; /* bitwise reproducible dQ, dK, dV */
  void* workspace;
  size_t workspace_bytes;
  void* stream;
  /* Optional: the saved_operands a flamia_forward of this problem filled (precision FP8 only).
   * When given, q, k and v are not read (their data may be NULL). A buffer the forward of
   * another problem filled (sizes, scale mode, key smoothing kind, or cu_seqlens contents,
   * compared through a 64-bit checksum) is found on the device: the outputs are then NaN and
   * flamia_check_device_status reports it. Not detectable: a forward of the same sizes, options
   * and cu_seqlens on other inputs, another smoothing vector or other static exponents.
   * The problem stays the forward's whole problem (a SMOOTH_VECTOR problem still names its
   * vector, though K̂ is not rebuilt). */
  const void* saved_operands;
  size_t saved_operands_bytes;
} flamia_backward_args;

/* Workspace sizes (bytes) for a problem; the workspace must be 256-byte aligned. */
flamia_status flamia_forward_workspace_size(const flamia_forward_args* args, size_t* bytes);
flamia_status flamia_backward_workspace_size(const flamia_backward_args* args, size_t* bytes);
/* Bytes of the optional saved_operands buffer for a problem (it depends on its sizes only). */
flamia_status flamia_saved_operands_size(const flamia_problem* problem, size_t* bytes);

/* Asynchronous on args->stream. Argument errors are returned at once. Invalid cu_seqlens
 * contents that only the device can see, and an Inf in q, k, v or d_o (E4M3 has none;
 * docs/numerics.md §7), are recorded in the workspace: outputs are then filled with NaN and
 * flamia_check_device_status reports the error. */
flamia_status flamia_forward(const flamia_forward_args* args);
flamia_status flamia_backward(const flamia_backward_args* args);

/* Synchronizes `stream` and reports (and clears) a device-side error recorded in `workspace`. */
flamia_status flamia_check_device_status(void* workspace, void* stream);

/* The message of the last error returned on this thread ("" if none). */
const char* flamia_last_error_message(void);
const char* flamia_status_name(flamia_status status);

/* Which kernel path a problem runs (e.g. "sm90a fp8 forward, hdim 128, exact scales"). */
const char* flamia_describe_forward(const flamia_forward_args* args);

#ifdef __cplusplus
}
#endif

#endif /* FLAMIA_FLAMIA_H_ */
