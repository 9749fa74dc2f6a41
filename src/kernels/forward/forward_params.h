// Kernel parameters of the forward (passed by value as a __grid_constant__, so the TMA
// descriptors live in parameter space).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "common/views.h"
#include "kernels/forward/scheduler.h"

namespace flamia::forward {

struct ForwardParams {
  CUtensorMap q_map;        // Q̂ [total_q][Hq][D], box {D, 1, ForwardTile::kBlockM}
  CUtensorMap k_map;        // K̂ [total_k][Hkv][D], box {D, 1, kBlockN}
  CUtensorMap vt_map;       // V̂ᵀ [Hkv*D][pad16(total_k)], box {128, D}
  CUtensorMap vt_tail_map;  // the same tensor, box {kVtTailKeys, D} for a narrower last sub-tile
  const int8_t* q_exp;      // [Hq][total_q]
  const int8_t* k_exp;      // [Hkv][total_k]
  const int8_t* v_exp;      // [Hkv][total_k]
  const float* lse_shift;   // [Hq][total_q] or nullptr
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int total_q;
  int total_k;
  int heads_q;
  int group_size;    // query heads per KV head
  float scale_log2;  // softmax_scale * log2(e)
  int causal;
  __nv_bfloat16* o;
  int64_t o_token_stride;
  int64_t o_head_stride;
  float* lse;              // [Hq][total_q]
  float* softmax_stats;    // [Hq][total_q][2] or nullptr
  int32_t* device_status;  // read; the fused producer records an Inf input there
  ScheduleView schedule;
  // Whether the CTAs take their items after the first from schedule.item_counter (1) or by a
  // stride of the grid (0: kDynamicItems off, or chunks of the overlapped forward, which share
  // one plan and so one counter).
  int dynamic_items;
  // Fused quantization (forward_kernel<..., kFusedQuantize>): the producer quantizes these BF16
  // inputs itself (fused_quantize.cuh); the maps and exponent arrays above are then unused.
  Bf16View fused_q;
  Bf16View fused_k;
  Bf16View fused_v;
  int fused_block32;   // scale_mode block32 (else exact)
  float* debug_p_hat;  // tests only: [Hq][total_q][total_k], see debug_probabilities.cuh
  int sliding_window;  // 0: none; W: causal rows see their last W keys (flamia.h)
  // forward_kernel<..., kStaticScales>: K̂'s and V̂'s exponent per KV head ([Hkv] each).
  const int8_t* static_key_exp;
  const int8_t* static_value_exp;
};

}  // namespace flamia::forward
