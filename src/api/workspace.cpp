// The workspace layout (see workspace.h for the picture).
#include "api/workspace.h"

#include "api/operand_carving.h"

#include "kernels/backward/backward.h"
#include "kernels/forward/forward.h"

namespace flamia::api {

WorkspaceLayout layout_workspace(const WorkspaceRequest& request, void* base) {
  const PackedShape& s = request.shape;
  const int d = s.head_dim;
  WorkspaceCarver carver(base);
  WorkspaceLayout layout;

  layout.status = carver.take<DeviceStatusRecord>(1);

  ForwardOperands& fwd = layout.fwd;
  BackwardOperands& bwd = layout.bwd;
  // With saved operands the copies of Q, K and V live in the caller's saved-operands buffer
  // (saved_operands.h); the dispatch points fwd and bwd at them.
  if (!request.saved_operands) carve_forward_inputs(carver, s, fwd);
  fwd.lse_shift =
      request.key_smoothing ? carver.take<float>(exponent_count(s.total_q, s.heads_q)) : nullptr;

  if (request.pass == Pass::kForward) {
    layout.scheduler = carver.take<char>(forward_scheduler_workspace_bytes(s));
  } else {
    if (!request.saved_operands)
      carve_backward_inputs(carver, s, fwd, bwd.q_t, bwd.k_centered_t, bwd.v);
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
