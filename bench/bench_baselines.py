#!/usr/bin/env python3
"""flamia's forward and forward+backward, quantization included, against every BF16 kernel
measured in the same process, on named workloads, causal or not (speed only; bench_attention.py
adds accuracy, the options and the anchors for the public workloads): cuDNN SDPA where every
document has the same length, FA2 varlen, FlexAttention with a document mask, and
FlashAttention-4 where its wheels were carried (FA4_SITE: scripts/fetch-fa4-wheels,
scripts/fa4-unpack; reported as an error otherwise, not fatal). Times are medians of calls
queued back to back (bench_attention.median_ms), the best of two rounds whose order alternates
(time_in_rounds). TFLOP/s: forward 4 L^2 D H per document (half
of it when causal), forward+backward 3.5 x that.

Without --causal the default workloads are non-causal versions of three public ones and the
extra GQA 8:1 and head-dim-64 shapes; --workloads-file adds a file's workloads (e.g.
bench/workloads_long.json: one document of 128k tokens).

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python [FA4_SITE=/tmp/fa4site] \
        python3 bench/bench_baselines.py --json OUT.json
    ... python3 bench/bench_baselines.py --causal --workloads-file bench/workloads_long.json \
        --workloads one-128k --json OUT.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_attention as ba  # noqa: E402

# The default workloads (bench/workloads.json and workloads_extra.json), run without the causal
# mask unless --causal.
NONCAUSAL_WORKLOADS = ("equal-2k", "equal-8k", "uniform", "equal-4k-gqa8", "equal-4k-d64")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--workloads", default=",".join(NONCAUSAL_WORKLOADS))
    ap.add_argument("--workloads-file", help="more workloads (the format of workloads.json)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--window", type=int, default=0,
                    help="a causal sliding window of this many keys (cuDNN is then not timed)")
    ap.add_argument("--backends", default="flamia,fa2_varlen,cudnn,flex,fa4",
                    help="which to time (comma-separated)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of timing, alternating the order (the best of them)")
    ba.add_warmup_argument(ap)
    opts = ap.parse_args()
    ba.set_warmup(opts.warmup_seconds)
    causal = opts.causal or opts.window > 0
    window = opts.window
    workloads = ba.all_workloads()
    if opts.workloads_file:
        workloads.update(json.loads(Path(opts.workloads_file).read_text())["workloads"])
    results = {}
    for name in opts.workloads.split(","):
        w = workloads[name]
        q, k, v, d_o, cu, max_len = ba.make_inputs(w)
        flops = ba.forward_flops(w["doc_lens"], w["heads_q"], w["head_dim"], causal=causal,
                                 window=window)
        flamia_window = {"window_size": ba.window_size(True, window)} if window else {}
        runs = {"flamia": lambda: ba.bench_flamia(q, k, v, d_o, cu, max_len, "exact",
                                                  causal=causal, **flamia_window),
                "fa2_varlen": lambda: ba.bench_fa2_varlen(q, k, v, d_o, cu, max_len,
                                                          causal=causal, window=window),
                "cudnn": lambda: (None if window else
                                  ba.bench_cudnn(q, k, v, d_o, w["doc_lens"], causal=causal)),
                "flex": lambda: ba.bench_flex(q, k, v, d_o, cu, causal=causal, window=window),
                "fa4": lambda: ba.bench_fa4(q, k, v, d_o, cu, max_len, causal=causal,
                                            window=window)}
        rec = {"fwd_flops": flops}
        runs = {b: bench for b, bench in runs.items() if b in opts.backends.split(",")}
        timed, errors = ba.time_in_rounds(runs, opts.rounds)
        for backend, error in errors.items():  # a backend that cannot run this shape
            rec[backend] = {"error": error}
        for backend, (fwd, fwdbwd) in timed.items():
            rec[backend] = {"fwd_ms": fwd, "fwdbwd_ms": fwdbwd,
                            "fwd_tflops": flops / fwd / 1e9,
                            "fwdbwd_tflops": ba.FWD_BWD_FLOP_FACTOR * flops / fwdbwd / 1e9}
        baselines = [b for b in timed if b != "flamia"]
        for kind in ("fwd", "fwdbwd") if "flamia" in timed and baselines else ():
            ms, backend = min((rec[b][f"{kind}_ms"], b) for b in baselines)
            rec[f"best_bf16_{kind}"] = backend
            rec[f"speedup_{kind}"] = ms / rec["flamia"][f"{kind}_ms"]
        results[name] = rec
        print(name, {b: (round(rec[b]["fwd_ms"], 3), round(rec[b]["fwdbwd_ms"], 3)) for b in timed},
              {k: v for k, v in rec.items() if k.startswith(("best", "speedup"))}, flush=True)
    Path(opts.json).write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                           "torch": torch.__version__, "causal": causal,
                                           "sliding_window": window, "rounds": opts.rounds,
                                           "warmup_seconds": opts.warmup_seconds,
                                           "workloads": results}, indent=1))


if __name__ == "__main__":
    main()
