"""How large FP8's error of the attention logits is on the model being trained, with and
without flamia's qk_rotation="hadamard".

At each held-out evaluation, train.py has the attention record the first held-out batch's
calls (one per layer) and measures, per layer, on the queries and keys that layer gave its
attention (after RoPE, before any quantization):

    error = softmax_scale * rms over visible pairs (i, j) of (q̂_i · k̂_j - q_i · k_j)

with q̂, k̂ the E4M3 values at per-token scales (flamia's `exact` blocks), in nats: a logit error
of e shifts a probability by a factor of about exp(±e). Reported as the mean over layers, plus
the mean logit spread (rms of softmax_scale * q·k) for scale.
"""

from __future__ import annotations

import math

import torch

import fp8_emulation

# Queries and keys probed per layer: the first tokens of the first held-out sequence.
PROBE_TOKENS = 1024


class Capture:
    """Wraps an attend; after arm(n), records the next n calls' (q, k, cu_seqlens)."""

    def __init__(self, attend):
        self.attend = attend
        self.remaining = 0
        self.calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        if hasattr(attend, "state"):
            self.state = attend.state

    def arm(self, calls: int):
        self.calls, self.remaining = [], calls

    def take(self) -> list:
        """The recorded calls (recording stops)."""
        calls, self.calls, self.remaining = self.calls, [], 0
        return calls

    def __call__(self, q, k, v, cu_seqlens, max_seqlen):
        if self.remaining > 0:
            self.remaining -= 1
            self.calls.append((q.detach()[:PROBE_TOKENS], k.detach()[:PROBE_TOKENS],
                               cu_seqlens.detach()))
        return self.attend(q, k, v, cu_seqlens, max_seqlen)


def visible_pairs(cu_seqlens: torch.Tensor, tokens: int) -> torch.Tensor:
    """(tokens, tokens) bool: causal and inside one document."""
    bounds = cu_seqlens.to(torch.long)
    positions = torch.arange(tokens, device=cu_seqlens.device)
    document = torch.bucketize(positions, bounds[1:], right=True)
    same = document[:, None] == document[None, :]
    return same & (positions[:, None] >= positions[None, :])


def layer_errors(q: torch.Tensor, k: torch.Tensor, cu_seqlens: torch.Tensor) -> dict:
    """q (L, Hq, D), k (L, Hkv, D) BF16 -> {"plain", "rotated", "spread"} in nats."""
    from flamia import _rotation  # the front's rotation, exactly as the kernels would see it

    tokens, heads_q, dim = q.shape
    scale = 1.0 / math.sqrt(dim)
    group = heads_q // k.shape[1]
    mask = visible_pairs(cu_seqlens, tokens)
    q32, k32 = q.float(), k.float().repeat_interleave(group, dim=1)
    exact = torch.einsum("qhd,khd->hqk", q32, k32)

    def rms_error(qx, kx):
        qx = fp8_emulation.fake_quantize_per_token(qx.float())
        kx = fp8_emulation.fake_quantize_per_token(kx.float()).repeat_interleave(group, dim=1)
        diff = (torch.einsum("qhd,khd->hqk", qx, kx) - exact) * scale
        return diff.pow(2)[:, mask].mean().sqrt().item()

    q_rot, k_rot = _rotation.rotate_qk(q, k, "hadamard")
    return {"plain": rms_error(q, k), "rotated": rms_error(q_rot, k_rot),
            "spread": (exact * scale).pow(2)[:, mask].mean().sqrt().item()}


def summarize(calls) -> dict:
    """Means over the captured layers: logit_err_fp8, logit_err_fp8_rotated, logit_rms."""
    with torch.no_grad(), torch.autocast("cuda", enabled=False), \
            torch.autocast("cpu", enabled=False):
        per_layer = [layer_errors(q, k, cu) for q, k, cu in calls]
    if not per_layer:
        return {}

    def mean(key):
        return sum(layer[key] for layer in per_layer) / len(per_layer)

    return {"logit_err_fp8": mean("plain"), "logit_err_fp8_rotated": mean("rotated"),
            "logit_rms": mean("spread")}
