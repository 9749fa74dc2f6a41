// The workspace layout (see workspace.h for the picture).
#include "api/workspace.h"

#include "kernels/backward/backward.h"
#include "kernels/forward/forward.h"

namespace flamia::api {
namespace {

size_t exponent_count(int tokens, int heads) {
  return size_t(tokens) * size_t(heads);
}

Fp8Copy take_copy(WorkspaceCarver& carver, size_t value_bytes, int tokens, int heads) {
  Fp8Copy copy;
  copy.values = carver.take<uint8_t>(value_bytes);
  copy.exponents = carver.take<int8_t>(exponent_count(tokens, heads));
  return copy;
}

// A second layout of the same quantized bytes: its exponents are those of the first layout.
Fp8Copy take_values_sharing_exponents(WorkspaceCarver& carver, size_t value_bytes,
                                      int8_t* exponents) {
  Fp8Copy copy;
  copy.values = carver.take<uint8_t>(value_bytes);
  copy.exponents = exponents;
  return copy;
}

}  // namespace

WorkspaceLayout layout_workspace(const WorkspaceRequest& request, void* base) {
  const PackedShape& s = request.shape;
  const int d = s.head_dim;
  WorkspaceCarver carver(base);
  WorkspaceLayout layout;

  layout.status = carver.take<DeviceStatusRecord>(1);

  ForwardOperands& fwd = layout.fwd;
  fwd.q = take_copy(carver, row_major_bytes(s.total_q, s.heads_q, d), s.total_q, s.heads_q);
  fwd.k = take_copy(carver, row_major_bytes(s.total_k, s.heads_kv, d), s.total_k, s.heads_kv);
  fwd.v_t = take_copy(carver, token_major_bytes(s.total_k, s.heads_kv, d), s.total_k, s.heads_kv);
  fwd.lse_shift =
      request.key_smoothing ? carver.take<float>(exponent_count(s.total_q, s.heads_q)) : nullptr;

  if (request.pass == Pass::kForward) {
    layout.scheduler = carver.take<char>(forward_scheduler_workspace_bytes(s));
  } else {
    BackwardOperands& bwd = layout.bwd;
    bwd.q_t = take_values_sharing_exponents(carver, token_major_bytes(s.total_q, s.heads_q, d),
                                            fwd.q.exponents);
    bwd.k_centered_t =
        take_copy(carver, token_major_bytes(s.total_k, s.heads_kv, d), s.total_k, s.heads_kv);
    bwd.v = take_values_sharing_exponents(carver, row_major_bytes(s.total_k, s.heads_kv, d),
                                          fwd.v_t.exponents);
    bwd.d_o = take_copy(carver, row_major_bytes(s.total_q, s.heads_q, d), s.total_q, s.heads_q);
    bwd.d_o_scaled_t =
        take_copy(carver, token_major_bytes(s.total_q, s.heads_q, d), s.total_q, s.heads_q);
    bwd.delta = carver.take<float>(exponent_count(s.total_q, s.heads_q));
    layout.scratch = carver.take<char>(backward_scratch_bytes(s, request.deterministic));
    if (request.centered_bf16_keys)
      layout.centered_bf16_keys = carver.take<uint16_t>(size_t(s.total_k) * s.heads_kv * d);
  }
  layout.bytes = carver.used();
  return layout;
}

}  // namespace flamia::api
