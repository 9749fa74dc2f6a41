#!/usr/bin/env python3
"""How often the backward's dK operand exponent gk changes from one step to the next (CPU, no
flamia needed): the question behind a rescale-skipping contract (docs/results-log.md, Next steps).

Per key row j the FP8 backward quantizes x_ij = dS_ij 2^eq_i over each 64-query block with
gk_j = ceil(log2(amax / 448)) (numerics §5.8) and rescales the dK accumulator row when gk
changes. A warp holds 16 key rows, so a warp-uniform skip of the rescale needs all 16 to keep
their exponent. With hysteresis H (keep gk while amax fits and lies at most H binades below
it), this prints the per-row change rate and the per-warp any-change rate over the visible
steps of one causal document of N(0, 1) q, k, v, dO (float64 attention, exact-mode eq).
Then the same for a carried rule (session 25, measured and not adopted: `carried_dk_exponent_ab`
in bench/results/h200.json): raise gk to a block's own exponent plus R binades of headroom when
that exceeds it, keep it otherwise, with how far below its own exponent a block's Ĥ then sits.

    python3 bench/dk_exponent_changes.py [--length 2048] [--dim 128]
"""
from __future__ import annotations

import argparse
import math

import torch

QUERY_BLOCK = 64  # the dK operand's query block (numerics §2, tile-aligned blocks)
KEYS_PER_WARP = 16  # accumulator rows of one warp in the backward's key warpgroups
E4M3_MAX = 448.0


def scale_exponent(a: torch.Tensor) -> torch.Tensor:
    return torch.ceil(torch.log2(a / E4M3_MAX))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    length, dim, blocks = a.length, a.dim, a.length // QUERY_BLOCK
    torch.manual_seed(a.seed)
    q, k, v, d_o = (torch.randn(length, dim, dtype=torch.float64) for _ in range(4))
    visible = torch.ones(length, length, dtype=torch.bool).tril()
    p = torch.softmax(((q @ k.T) / math.sqrt(dim)).masked_fill(~visible, -math.inf), dim=1)
    ds = p * (d_o @ v.T - (d_o * (p @ v)).sum(1, keepdim=True))
    x = ds * torch.exp2(scale_exponent(q.abs().amax(1)))[:, None]
    amax = torch.stack([x[b * QUERY_BLOCK:(b + 1) * QUERY_BLOCK].abs().amax(0)
                        for b in range(blocks)])  # [block, key]
    keys = torch.arange(length)
    # steps after a key's own diagonal block (the first sets gk from nothing)
    steps = torch.stack([keys < b * QUERY_BLOCK for b in range(blocks)])

    def rates(changes: torch.Tensor) -> tuple[float, float]:
        """Per-row change rate and per-warp any-change rate over the visible steps."""
        row_rate = (changes & steps).sum().item() / steps.sum().item()
        warp_steps = steps.view(blocks, -1, KEYS_PER_WARP).all(2)
        warp_changes = changes.view(blocks, -1, KEYS_PER_WARP).any(2) & warp_steps
        return row_rate, warp_changes.sum().item() / max(warp_steps.sum().item(), 1)

    for hysteresis in (0, 1, 2, 3, 4):
        state = torch.full((length,), math.nan, dtype=torch.float64)
        changes = torch.zeros(blocks, length, dtype=torch.bool)
        for b in range(blocks):
            new = scale_exponent(amax[b])
            unset = torch.isnan(state)
            keep = ~unset & (new <= state) & (state - new <= hysteresis)
            update = (amax[b] > 0) & ~keep
            changes[b] = update & ~unset
            state = torch.where(update, new, state)
        row_rate, warp_rate = rates(changes)
        print(f"H={hysteresis}: gk changes on {100 * row_rate:.1f}% of a row's steps; "
              f"{100 * warp_rate:.1f}% of a warp's steps need a rescale")
    for headroom in (0, 1, 2, 3):
        state = torch.full((length,), -math.inf, dtype=torch.float64)
        changes = torch.zeros(blocks, length, dtype=torch.bool)
        below = []
        for b in range(blocks):
            new = scale_exponent(amax[b])
            raise_ = (amax[b] > 0) & (new > state)
            changes[b] = raise_ & torch.isfinite(state)
            state = torch.where(raise_, new + headroom, state)
            below.append((state - new)[amax[b] > 0])
        row_rate, warp_rate = rates(changes)
        below = torch.cat(below)
        print(f"carried, R={headroom}: gk rises on {100 * row_rate:.1f}% of a row's steps; "
              f"{100 * warp_rate:.1f}% of a warp's steps need a rescale; a block's Ĥ sits "
              f"{below.mean().item():.2f} binades below its own exponent on average "
              f"(max {below.max().item():.0f})")


if __name__ == "__main__":
    main()
