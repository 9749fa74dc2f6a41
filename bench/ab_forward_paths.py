#!/usr/bin/env python3
"""flamia under each value of one of its path switches (FLAMIA_FORWARD_QUANTIZE: separate or
fused; FLAMIA_FORWARD_OVERLAP: off, auto or CHUNKS:SMS), in alternating rounds in one process,
on the public and extra workloads: the forward's ms (no gradient, quantization included; median
of calls queued back to back, bench_attention.median_ms) per workload, value and round, with
--fwdbwd also a training step's (forward keeping its operands, then the backward), and whether
every value's O and LSE equal the first value's bit for bit.

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python python3 bench/ab_forward_paths.py \
        --json OUT.json [--variable FLAMIA_FORWARD_QUANTIZE] [--paths separate,fused]
        [--rounds 2] [--workloads a,b] [--scale-mode exact|static] [--fwdbwd]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import (all_workloads, environment, flamia_runner, make_inputs,  # noqa: E402
                             median_ms, time_pair)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--variable", default="FLAMIA_FORWARD_QUANTIZE")
    ap.add_argument("--paths", default="separate,fused")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workloads", default="")
    ap.add_argument("--scale-mode", default="exact")
    ap.add_argument("--fwdbwd", action="store_true", help="time a training step too")
    opts = ap.parse_args()
    import flamia

    workloads = all_workloads()
    names = opts.workloads.split(",") if opts.workloads else list(workloads)
    paths = opts.paths.split(",")
    record = {"variable": opts.variable, "scale_mode": opts.scale_mode, "paths": paths,
              "ms": {}, "fwdbwd_ms": {}, "bitwise_equal": {}}
    for name in names:
        w = workloads[name]
        q, k, v, d_o, cu, max_len = make_inputs(w)
        options = {}
        if opts.scale_mode == "static":  # this batch's amax, computed once outside the timing
            options["static_exponents"] = flamia.static_exponents(k, v)

        def forward():
            return flamia.attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True,
                                           scale_mode=opts.scale_mode, return_lse=True,
                                           **options)

        outputs = {}
        for path in paths:
            with environment(opts.variable, path):
                outputs[path] = [t.clone() for t in forward()]
        first = outputs[paths[0]]
        record["bitwise_equal"][name] = {
            path: all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                      for a, b in zip(out, first))
            for path, out in outputs.items()}
        runner = flamia_runner(q, k, v, d_o, cu, max_len, opts.scale_mode, **options)
        times = {path: [] for path in paths}
        step_times = {path: [] for path in paths}
        for r in range(opts.rounds):
            for path in (paths if r % 2 == 0 else paths[::-1]):
                with environment(opts.variable, path):
                    if opts.fwdbwd:
                        fwd, step = time_pair(runner)
                        step_times[path].append(step)
                    else:
                        fwd = median_ms(forward)
                    times[path].append(fwd)
        record["ms"][name] = times
        if opts.fwdbwd:
            record["fwdbwd_ms"][name] = step_times
        print(name, {p: [round(t, 4) for t in ts] for p, ts in times.items()},
              {p: [round(t, 4) for t in ts] for p, ts in step_times.items()} if opts.fwdbwd
              else "", record["bitwise_equal"][name], flush=True)
    Path(opts.json).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
