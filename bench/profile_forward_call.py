#!/usr/bin/env python3
"""Where one flamia forward call's time goes (end to end through the PyTorch front): every CUDA
kernel it launches with its duration, the idle gaps between them, and the call's wall time,
from torch.profiler, for each workload of bench/workloads.json. The end-to-end forward adds
0.4-0.7 ms to the forward kernel on the public workloads (docs/results-log.md, Speed); this says
which part is the quantize pass, which the small kernels (argument checks, schedule plan) and
which the host. With --backward it profiles a training step's attention instead: the forward
with a gradient wanted, then out.backward(dO) (autograd's own kernels included).

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python python3 bench/profile_forward_call.py \
        --json OUT.json [--workloads equal-2k,equal-8k] [--calls 5] [--backward]
        [--scale-mode static]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_attention import make_inputs  # noqa: E402


def kernel_events(prof) -> list[dict]:
    """The profiled CUDA kernels in launch order: name, start and duration (microseconds)."""
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    rows = [{"name": e.name, "start_us": e.time_range.start, "us": e.time_range.elapsed_us()}
            for e in events]
    return sorted(rows, key=lambda r: r["start_us"])


def summarize_call(kernels: list[dict], wall_us: float) -> dict:
    """Kernels of one call with the gaps before each (0 for kernels that overlap the one before,
    e.g. FLAMIA_FORWARD_OVERLAP's chunks), their start from the first kernel's, and the totals."""
    out, busy, previous_end = [], 0.0, None
    first_start = kernels[0]["start_us"] if kernels else 0.0
    for k in kernels:
        gap = 0.0 if previous_end is None else max(0.0, k["start_us"] - previous_end)
        out.append({"name": k["name"][:120], "us": round(k["us"], 2), "gap_before_us": round(gap, 2),
                    "at_us": round(k["start_us"] - first_start, 2)})
        busy += k["us"]
        previous_end = max(previous_end or 0.0, k["start_us"] + k["us"])
    span = (previous_end - kernels[0]["start_us"]) if kernels else 0.0
    return {"kernels": out, "kernel_us": round(busy, 2), "gpu_span_us": round(span, 2),
            "wall_us": round(wall_us, 2)}


def profile_workload(w: dict, calls: int, backward: bool, scale_mode: str = "exact") -> dict:
    import flamia

    q, k, v, d_o, cu, max_len = make_inputs(w)
    options = {"static_exponents": flamia.static_exponents(k, v)} if scale_mode == "static" else {}
    if backward:
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))

    def call():
        out = flamia.attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True,
                                      scale_mode=scale_mode, **options)
        if backward:
            out.backward(d_o)
            for t in (q, k, v):
                t.grad = None
        return out

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            start.record()
            call()
            end.record()
            end.synchronize()
        per_call.append(summarize_call(kernel_events(prof), 1000.0 * start.elapsed_time(end)))
    best = min(per_call, key=lambda c: c["wall_us"])
    return {"calls": calls, "best_call": best,
            "wall_us_all": [c["wall_us"] for c in per_call]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--workloads", default="")
    ap.add_argument("--workloads-file", default=str(ROOT / "bench/workloads.json"))
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--backward", action="store_true",
                    help="profile forward (gradient wanted) + backward instead of the forward")
    ap.add_argument("--scale-mode", default="exact", help="exact, block32 or static (the "
                    "batch's own K/V exponents, computed outside the profile)")
    opts = ap.parse_args()
    workloads = json.loads(Path(opts.workloads_file).read_text())["workloads"]
    chosen = [n for n in workloads if not opts.workloads or n in opts.workloads.split(",")]
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "call": "forward + backward" if opts.backward else "forward", "workloads": {}}
    for name in chosen:
        r = profile_workload(workloads[name], opts.calls, opts.backward, opts.scale_mode)
        results["workloads"][name] = r
        b = r["best_call"]
        print(f"{name}: wall {b['wall_us']:.0f} us, kernels {b['kernel_us']:.0f} us over a "
              f"{b['gpu_span_us']:.0f} us span")
        for k in b["kernels"]:
            print(f"    at {k['at_us']:8.1f} {k['us']:8.1f} us (+{k['gap_before_us']:6.1f} gap)  "
                  f"{k['name'][:80]}")
    Path(opts.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
