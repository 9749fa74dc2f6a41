// The layout of the caller's workspace, computed by one function for both passes so that the
// size query, the validation and the launch can never disagree.
//
//   device status record (DeviceStatusRecord, first: the kernels read its first word)
//   ForwardOperands: Q̂ (values, exponents), K̂ (values, exponents), V̂ᵀ (values, exponents),
//                    lse_shift (forward with key smoothing only)
//   forward:  forward scheduler workspace (forward_scheduler_workspace_bytes)
//   backward: BackwardOperands: Q̂ᵀ, K̂cᵀ (+ exponents), V̂, dÔ (+ exponents),
//             dO''ᵀ (+ exponents), delta; then the backward scratch (backward_scratch_bytes)
// With saved operands (saved_operands.h) Q̂, K̂, V̂ᵀ, Q̂ᵀ, K̂cᵀ and V̂ are not in the workspace.
//
// Every buffer starts at a multiple of kWorkspaceAlignment (256) from the base. Q̂ᵀ shares Q̂'s
// exponents and V̂ shares V̂ᵀ's (docs/numerics.md §3: same bytes, same exponents).
#pragma once

#include <cstddef>

#include "api/device_status.h"
#include "common/layout.h"

namespace flamia::api {

enum class Pass { kForward, kBackward };

struct WorkspaceRequest {
  PackedShape shape;
  Pass pass = Pass::kForward;
  bool key_smoothing = false;       // lse_shift is needed (the forward with any key smoothing)
  bool deterministic = false;       // backward only: sizes the scratch
  bool centered_bf16_keys = false;  // backward, fp8-bf16grad: BF16 k - k_first for dQ
  bool saved_operands = false;      // the copies of Q, K, V are in the saved-operands buffer
};

struct WorkspaceLayout {
  DeviceStatusRecord* status = nullptr;
  ForwardOperands fwd;
  BackwardOperands bwd;                // backward only
  void* scheduler = nullptr;           // forward only
  void* scratch = nullptr;             // backward only
  void* centered_bf16_keys = nullptr;  // backward, fp8-bf16grad only
  size_t bytes = 0;                    // total, a multiple of kWorkspaceAlignment
};

// With base == nullptr only measures (all pointers null); otherwise carves from `base`, which
// must be kWorkspaceAlignment-aligned and hold at least the measured bytes.
WorkspaceLayout layout_workspace(const WorkspaceRequest& request, void* base);

}  // namespace flamia::api
