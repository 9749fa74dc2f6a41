"""A/B of the training forward keeping its quantized Q, K, V (FLAMIA_KEEP_OPERANDS=1, the
default) against the backward quantizing q, k, v again (=0), in alternating rounds in one
process: the training forward, the backward alone (retain_graph), fwd+bwd, and the peak memory
of a step above its inputs.

  python3 bench/ab_keep_operands.py --json OUT.json [--workloads a,b] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import (all_workloads, environment, make_inputs, median_ms,  # noqa: E402
                             with_grad)

MODES = {"keep": "1", "requantize": "0"}


def measure(w, mode):
    with environment("FLAMIA_KEEP_OPERANDS", MODES[mode]):
        return measure_in_mode(w)


def measure_in_mode(w):
    import flamia

    q, k, v, d_o, cu, max_len = make_inputs(w)
    qq, kk, vv = with_grad((q, k, v), True)

    def forward():
        return flamia.attn_varlen_func(qq, kk, vv, cu, cu, max_len, max_len, causal=True)

    def step():
        forward().backward(d_o)
        for t in (qq, kk, vv):
            t.grad = None

    rec = {"fwd_train_ms": median_ms(forward), "fwdbwd_ms": median_ms(step)}
    out = forward()
    rec["bwd_ms"] = median_ms(lambda: out.backward(d_o, retain_graph=True))
    del out
    for t in (qq, kk, vv):
        t.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    rec["step_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
    # What autograd holds between the forward and the backward when q, k, v are intermediate
    # results (as after a projection and rotary embedding): here the product with 1.0, whose
    # backward keeps nothing, so only the attention decides whether they stay alive.
    before = torch.cuda.memory_allocated()
    out = flamia.attn_varlen_func(qq * 1.0, kk * 1.0, vv * 1.0, cu, cu, max_len, max_len,
                                  causal=True)
    torch.cuda.synchronize()
    rec["held_for_backward_mib"] = (torch.cuda.memory_allocated() - before) / 2**20
    del out
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--workloads", default="equal-2k,equal-8k,uniform,longtail,longtail-d64-gqa")
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    workloads = all_workloads()
    results = {"device": torch.cuda.get_device_name(), "rounds": opts.rounds, "workloads": {}}
    for name in opts.workloads.split(","):
        runs = {mode: [] for mode in MODES}
        for r in range(opts.rounds):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            for mode in order:
                runs[mode].append(measure(workloads[name], mode))
        summary = {}
        for mode, recs in runs.items():
            summary[mode] = {key: min(rec[key] for rec in recs) for key in recs[0]}
            summary[mode]["rounds"] = recs
        results["workloads"][name] = summary
        k, q = summary["keep"], summary["requantize"]
        print(f"{name:18s} fwd_train {k['fwd_train_ms']:.3f}/{q['fwd_train_ms']:.3f} "
              f"bwd {k['bwd_ms']:.3f}/{q['bwd_ms']:.3f} fwdbwd {k['fwdbwd_ms']:.3f}/"
              f"{q['fwdbwd_ms']:.3f} ms; held {k['held_for_backward_mib']:.0f}/"
              f"{q['held_for_backward_mib']:.0f} MiB, step peak {k['step_peak_mib']:.0f}/"
              f"{q['step_peak_mib']:.0f} MiB (keep/requantize)", flush=True)
    Path(opts.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
