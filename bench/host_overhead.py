#!/usr/bin/env python3
"""How much of flamia's end-to-end time is host-side (Python, ctypes, launches)?

Times flamia's forward and forward+backward through the PyTorch front per call (events around
one call, as bench_attention.py does) and amortized over back-to-back calls (events around 20
calls: host work overlaps the GPU's), on the public workloads.

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python python3 bench/host_overhead.py --json OUT
"""
import argparse
import json
from pathlib import Path

import torch

import bench_attention as ba
import flamia

BACK_TO_BACK = 20


def amortized_ms(fn, calls=BACK_TO_BACK, reps=5):
    fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        best.append(start.elapsed_time(end) / calls)
    return sorted(best)[len(best) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    opts = ap.parse_args()
    workloads = json.loads((ba.ROOT / "bench/workloads.json").read_text())["workloads"]
    out = {}
    for name, w in workloads.items():
        q, k, v, d_o, cu, max_len = ba.make_inputs(w)

        def fwd():
            return flamia.attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True)

        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))

        def fwdbwd():
            o = flamia.attn_varlen_func(qg, kg, vg, cu, cu, max_len, max_len, causal=True)
            o.backward(d_o)

        out[name] = {"fwd_per_call_ms": ba.median_ms(fwd, per_call=True),
                     "fwd_amortized_ms": amortized_ms(fwd),
                     "fwdbwd_per_call_ms": ba.median_ms(fwdbwd, per_call=True),
                     "fwdbwd_amortized_ms": amortized_ms(fwdbwd, calls=5)}
        print(name, {k2: round(v2, 3) for k2, v2 in out[name].items()}, flush=True)
    Path(opts.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
