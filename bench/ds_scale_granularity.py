#!/usr/bin/env python3
"""What the granularity of dS's FP8 scales costs dK and dQ (CPU, no flamia needed): the question
behind a cheaper backward contract for scale mode static (docs/results-log.md, session 37).

The FP8 backward quantizes x_ij = dS_ij 2^eq_i twice (numerics §5.7-5.8): for dK with one
exponent per (key row, 64-query block) and for dQ with one per (query row, 128-key block), each
from that block's amax. Finding those amaxes, and rescaling dK's accumulator rows when the
exponent moves, is about 4 of the key warpgroups' ~25 instructions per score. With coarser
scales the amax and the rescale go away, at a cost in accuracy this script measures:
  row-block  the contract (per key row / query row, per block);
  tile       one exponent per (64-query, 128-key) tile, its amax (both products share it);
  head       one exponent for the whole head (what a delayed, per-head scale gives at best:
             the current amax itself);
  head-2     the same two binades lower (a delayed scale that is stale by a factor of 4: the
             largest values saturate at 448).
Only dS's quantization differs (Q, K, dO, O in float64), so each error is that of the scale
alone: relative L2 of dK = Σ_i dS_ij q_i and dQ = Σ_j dS_ij (k_j - k_0) against float64, and
the fraction of dS's squared mass flushed to zero. One causal document of N(0, 1) q, k, v, dO,
its logits sharpened by --temperature (higher: peakier rows, a wider range of dS).

    python3 bench/ds_scale_granularity.py [--length 2048] [--dim 128] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math

import torch

QUERY_BLOCK = 64  # dK's operand blocks (numerics §2: tile-aligned, 64 queries)
KEY_BLOCK = 128  # dQ's operand blocks (128 keys)
E4M3_MAX = 448.0


def scale_exponent(amax: torch.Tensor) -> torch.Tensor:
    """The smallest e with amax 2^-e <= 448 (numerics §1), 0 where amax is 0."""
    e = torch.ceil(torch.log2(amax / E4M3_MAX))
    return torch.where(amax > 0, e, torch.zeros_like(e))


def e4m3(x: torch.Tensor) -> torch.Tensor:
    """RNE to E4M3 with satfinite, back in float64."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float64)


def block_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """amax over blocks of rows x cols (x's shape divisible), expanded back to x's shape."""
    r, c = x.shape
    a = x.abs().view(r // rows, rows, c // cols, cols).amax(dim=(1, 3))
    return a.repeat_interleave(rows, 0).repeat_interleave(cols, 1)


def quantized(x: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    scale = torch.exp2(exponent)
    return e4m3(x / scale) * scale


def study(length: int, dim: int, temperature: float, seed: int) -> dict:
    torch.manual_seed(seed)
    q, k, v, d_o = (torch.randn(length, dim, dtype=torch.float64) for _ in range(4))
    visible = torch.ones(length, length, dtype=torch.bool).tril()
    logits = temperature * (q @ k.T) / math.sqrt(dim)
    p = torch.softmax(logits.masked_fill(~visible, -math.inf), dim=1)
    ds = p * (d_o @ v.T - (d_o * (p @ v)).sum(1, keepdim=True))
    eq = scale_exponent(q.abs().amax(1))
    x = ds * torch.exp2(eq)[:, None]  # what the kernels quantize
    kc = k - k[0]
    dk_exact, dq_exact = ds.T @ q, ds @ kc

    amax_head = x.abs().max()
    exponents = {
        "row-block": (scale_exponent(block_amax(x, QUERY_BLOCK, 1)),  # dK: per key, 64 queries
                      scale_exponent(block_amax(x, 1, KEY_BLOCK))),  # dQ: per query, 128 keys
        "tile": (scale_exponent(block_amax(x, QUERY_BLOCK, KEY_BLOCK)),) * 2,
        "head": (scale_exponent(amax_head).expand_as(x),) * 2,
        "head-2": ((scale_exponent(amax_head) - 2).expand_as(x),) * 2,
    }
    mass = (ds ** 2).sum().item()
    rows = {}
    for name, (e_dk, e_dq) in exponents.items():
        h = quantized(x, e_dk) * torch.exp2(-eq)[:, None]
        g = quantized(x, e_dq) * torch.exp2(-eq)[:, None]
        flushed = ((h == 0) & (ds != 0)).to(torch.float64)
        # per query row (dQ) and key row (dK): the global norm hides rows whose whole gradient
        # sits far below the head's largest
        dq_rows = (g @ kc - dq_exact).norm(dim=1) / dq_exact.norm(dim=1).clamp_min(1e-300)
        dk_rows = (h.T @ q - dk_exact).norm(dim=1) / dk_exact.norm(dim=1).clamp_min(1e-300)
        rows[name] = {
            "dk_rel_l2": ((h.T @ q - dk_exact).norm() / dk_exact.norm()).item(),
            "dq_rel_l2": ((g @ kc - dq_exact).norm() / dq_exact.norm()).item(),
            "dq_row_rel_l2_p99": dq_rows.quantile(0.99).item(),
            "dq_row_rel_l2_max": dq_rows.max().item(),
            "dk_row_rel_l2_p99": dk_rows.quantile(0.99).item(),
            "dk_row_rel_l2_max": dk_rows.max().item(),
            "ds_mass_flushed_dk": ((ds ** 2) * flushed).sum().item() / mass,
            "ds_flushed_dk": (flushed.sum() / (ds != 0).sum()).item(),
        }
    return {"length": length, "dim": dim, "temperature": temperature, "seed": seed,
            "x_binades_row_max_spread": (torch.log2(x.abs().amax(1).clamp_min(1e-300)).max()
                                         - torch.log2(x.abs().amax(1)[1:]).min()).item(),
            "scales": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--temperatures", default="1,2,4")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    results = [study(a.length, a.dim, float(t), a.seed) for t in a.temperatures.split(",")]
    print(f"{'temperature':>11} {'scales':>10} {'dK rel L2':>10} {'dQ rel L2':>10} "
          f"{'dK row p99/max':>17} {'dQ row p99/max':>17} {'dS flushed':>11} {'its mass':>9}")
    for r in results:
        for name, s in r["scales"].items():
            print(f"{r['temperature']:>11} {name:>10} {s['dk_rel_l2']:>10.2e} "
                  f"{s['dq_rel_l2']:>10.2e} "
                  f"{s['dk_row_rel_l2_p99']:>8.2e}/{s['dk_row_rel_l2_max']:.2e} "
                  f"{s['dq_row_rel_l2_p99']:>8.2e}/{s['dq_row_rel_l2_max']:.2e} "
                  f"{s['ds_flushed_dk']:>11.2%} {s['ds_mass_flushed_dk']:>9.2e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": "python3 bench/ds_scale_granularity.py", "runs": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
