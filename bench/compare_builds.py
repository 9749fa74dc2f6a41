#!/usr/bin/env python3
"""Are two builds of libflamia bitwise equal on the training path? Runs forward + deterministic
backward with each library (one subprocess per library: the library loads once per process) on
the same seeded inputs, for both precisions and scale modes, and reports how many elements of O,
LSE, dQ, dK, dV differ. Used to show that a kernel change kept every bit.

    PYTHONPATH=python python3 bench/compare_builds.py LIB_A LIB_B [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CASES = [  # (doc lengths, heads_q, heads_kv, head_dim, scale_mode, precision)
    ([1, 17, 113, 2048, 700, 96], 8, 2, 128, "exact", "fp8"),
    ([4096, 33, 1000], 4, 4, 128, "block32", "fp8"),
    ([512, 1, 1500, 64], 8, 4, 64, "exact", "fp8"),
    ([1024, 300], 4, 1, 128, "exact", "fp8-bf16grad"),
    ([1, 17, 113, 2048, 700, 96], 8, 2, 128, "static", "fp8"),
    ([512, 1, 1500, 64], 8, 4, 64, "static", "fp8"),
    # packed runs of short documents (the backward's packed CTAs, paired windows among them)
    ([16] * 96 + [700] + [16] * 40 + [5, 59] * 8, 8, 2, 128, "exact", "fp8"),
    ([32] * 64 + [17, 40, 7] * 12, 4, 4, 64, "static", "fp8"),
    ([16] * 64 + [300] + [16] * 20, 4, 2, 128, "static", "fp8"),
]


def run_one(out_path: str) -> None:
    import torch
    import flamia
    results = {}
    for n, (docs, hq, hkv, d, mode, precision) in enumerate(CASES):
        g = torch.Generator(device="cuda").manual_seed(1234 + n)
        total = sum(docs)
        q, k, v, d_o = (torch.randn(total, h, d, device="cuda", generator=g, dtype=torch.float32)
                        .to(torch.bfloat16) for h in (hq, hkv, hkv, hq))
        for t in (q, k, v):
            t.requires_grad_(True)
        cu = torch.tensor([0] + list(torch.tensor(docs).cumsum(0)), dtype=torch.int32,
                          device="cuda")
        # static: K's and V's exponents from this batch (delayed scaling would take a past one's)
        static = ({"static_exponents": flamia.static_exponents(k.detach(), v.detach(), margin=1)}
                  if mode == "static" else {})
        o, lse = flamia.attn_varlen_func(q, k, v, cu, cu, max(docs), max(docs), causal=True,
                                         scale_mode=mode, precision=precision,
                                         deterministic=True, return_lse=True, **static)
        o.backward(d_o)
        results[n] = {name: t.detach().cpu() for name, t in
                      (("o", o), ("lse", lse), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad))}
    torch.save(results, out_path)


def bits(t):
    """The tensor's elements as integers of the same width (BF16 or FP32), compared bit for bit."""
    import torch
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--run-one":
        run_one(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lib_a")
    ap.add_argument("lib_b")
    ap.add_argument("--json")
    opts = ap.parse_args()
    import torch
    outs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, lib in enumerate((opts.lib_a, opts.lib_b)):
            path = os.path.join(tmp, f"{i}.pt")
            subprocess.run([sys.executable, __file__, "--run-one", path], check=True,
                           env={**os.environ, "FLAMIA_LIBRARY": lib})
            outs.append(torch.load(path))
    report = {}
    for n, case in enumerate(CASES):
        a, b = outs[0][n], outs[1][n]
        diff = {name: int((bits(a[name]) != bits(b[name])).sum()) for name in a}
        report[str(case)] = {"differing_elements": diff,
                             "elements": {name: a[name].numel() for name in a}}
        print(case, diff, flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
