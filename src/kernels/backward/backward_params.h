// Kernel parameters of the backward (passed by value as a __grid_constant__), built on the host
// from BackwardKernelArgs by backward_launch.cu.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/views.h"

namespace flamia::backward {

struct BackwardParams {
  // The FP8 path's per-step query tiles, loaded by TMA (query_pipeline.cuh); box kBlockM queries.
  CUtensorMap q_map;             // Q̂ [total_q][Hq][D], box {D, 1, kBlockM}
  CUtensorMap d_o_map;           // dÔ, the same shape
  CUtensorMap q_t_map;           // Q̂ᵀ [Hq * D][padded_q], box {kBlockM, D}
  CUtensorMap d_o_scaled_t_map;  // dÔ''ᵀ, the same shape
  // Fp8QueryFactors of every (query head, token): [Hq * kRowFactorFields][padded_q] FP32 words
  // (row_factors.cu), box {kBlockM, kRowFactorFields}.
  CUtensorMap row_factors_map;
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int batch;
  int total_q;
  int total_k;
  int padded_q;  // pad16(total_q): token pitch of the token-major copies
  int padded_k;
  int heads_q;
  int heads_kv;
  int group_size;  // query heads per KV head
  int key_tiles_per_doc;
  int key_tile_slots;         // key_tiles_bound(): grid.x = key_tile_slots * heads_kv
  const int32_t* tile_order;  // [key_tile_slots] launch order (backward_schedule.h)
  int causal;
  int deterministic;
  int pack_documents;  // FP8: runs of short documents share a CTA (key_tiles.h)
  float softmax_scale;
  float scale_log2;  // softmax_scale * log2(e), computed exactly as the forward does

  // FP8 operands of the quantize pass (docs/numerics.md §3); exponents [heads][tokens].
  const uint8_t* q;  // Q̂ [total_q][Hq][D]
  const int8_t* q_exp;
  const uint8_t* k;  // K̂ [total_k][Hkv][D]
  const int8_t* k_exp;
  const uint8_t* v;  // V̂ [total_k][Hkv][D]
  const int8_t* v_exp;
  const uint8_t* d_o;  // dÔ [total_q][Hq][D]
  const int8_t* d_o_exp;
  const uint8_t* q_t;           // Q̂ᵀ [Hq][D][padded_q], permuted tokens (exponents q_exp)
  const uint8_t* k_centered_t;  // K̂cᵀ [Hkv][D][padded_k], natural order
  const int8_t* k_centered_exp;
  const uint8_t* d_o_scaled_t;  // dÔ''ᵀ [Hq][D][padded_q], permuted tokens
  const int8_t* d_o_scaled_exp;
  const float* delta;          // D_i [Hq][total_q]
  const float* softmax_stats;  // [Hq][total_q][2] = {M, l}
  // Scale mode kStatic: K̂'s and V̂'s exponent per KV head ([Hkv] each), or null: the query
  // factors fold them (row_factor_values) and backward_kernel<..., kStaticScales> reads them so.
  const int8_t* static_key_exp;
  const int8_t* static_value_exp;

  // BF16 inputs (precision fp8-bf16grad only).
  Bf16View q16, k16, v16, d_o16;

  Bf16MutableView dk, dv;
  float* dq_accum;        // FP32 [Hq][total_q][D + kDqRowPadding] (dq_buffer.h), zeroed first
  int32_t* dq_semaphore;  // deterministic: [Hq][total_q], zeroed before the kernel
  const int32_t* device_status;
  float* debug_p_hat;  // optional [Hq][total_q][total_k]; see BackwardKernelArgs
  int sliding_window;  // 0: none; W: causal rows see their last W keys (flamia.h)
};

}  // namespace flamia::backward
