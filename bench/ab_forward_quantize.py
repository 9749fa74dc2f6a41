#!/usr/bin/env python3
"""The forward (no gradient, quantization included) under each of the paths named by
FLAMIA_FORWARD_QUANTIZE, in alternating rounds in one process, on the public and extra
workloads: ms (median of calls queued back to back, bench_attention.median_ms) per workload,
path and round, and whether every path's O and LSE equal the first path's bit for bit.

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python python3 bench/ab_forward_quantize.py \
        --json OUT.json [--paths separate,fused] [--rounds 2] [--workloads a,b]
        [--scale-mode exact]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import all_workloads, environment, make_inputs, median_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--paths", default="separate,fused")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workloads", default="")
    ap.add_argument("--scale-mode", default="exact")
    opts = ap.parse_args()
    import flamia

    workloads = all_workloads()
    names = opts.workloads.split(",") if opts.workloads else list(workloads)
    paths = opts.paths.split(",")
    record = {"scale_mode": opts.scale_mode, "paths": paths, "ms": {}, "bitwise_equal": {}}
    for name in names:
        w = workloads[name]
        q, k, v, _, cu, max_len = make_inputs(w)

        def forward():
            return flamia.attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True,
                                           scale_mode=opts.scale_mode, return_lse=True)

        outputs = {}
        for path in paths:
            with environment("FLAMIA_FORWARD_QUANTIZE", path):
                outputs[path] = [t.clone() for t in forward()]
        first = outputs[paths[0]]
        record["bitwise_equal"][name] = {
            path: all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                      for a, b in zip(out, first))
            for path, out in outputs.items()}
        times = {path: [] for path in paths}
        for r in range(opts.rounds):
            for path in (paths if r % 2 == 0 else paths[::-1]):
                with environment("FLAMIA_FORWARD_QUANTIZE", path):
                    times[path].append(median_ms(forward))
        record["ms"][name] = times
        print(name, {p: [round(t, 4) for t in ts] for p, ts in times.items()},
              record["bitwise_equal"][name], flush=True)
    Path(opts.json).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
