#!/usr/bin/env python3
"""Non-causal packed documents (bidirectional attention inside each document): flamia's forward
and forward+backward, quantization included, against the BF16 kernels measured in the same
process: cuDNN SDPA where every document has the same length, FA2 varlen
(window_size=(-1, -1)) and FlexAttention with a document mask. FlashAttention-4 is not included
(its wheels take three device calls to carry; bench_attention.py times it on the causal
workloads). Times are medians of calls queued back to back (bench_attention.median_ms);
TFLOP/s count every score (forward 4 L^2 D H per document, forward+backward 3.5 x that).

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python python3 bench/bench_noncausal.py \
        --json OUT.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_attention as ba  # noqa: E402

# Workloads of bench/workloads.json and workloads_extra.json whose document mixes are run here
# without the causal mask: three public ones and the extra GQA 8:1 and head-dim-64 shapes.
WORKLOADS = ("equal-2k", "equal-8k", "uniform", "equal-4k-gqa8", "equal-4k-d64")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    opts = ap.parse_args()
    workloads = ba.all_workloads()
    results = {}
    for name in opts.workloads.split(","):
        w = workloads[name]
        q, k, v, d_o, cu, max_len = ba.make_inputs(w)
        flops = ba.forward_flops(w["doc_lens"], w["heads_q"], w["head_dim"], causal=False)
        runs = {"flamia": lambda: ba.bench_flamia(q, k, v, d_o, cu, max_len, "exact",
                                                  causal=False),
                "fa2_varlen": lambda: ba.bench_fa2_varlen(q, k, v, d_o, cu, max_len, causal=False),
                "cudnn": lambda: ba.bench_cudnn(q, k, v, d_o, w["doc_lens"], causal=False),
                "flex": lambda: ba.bench_flex(q, k, v, d_o, cu, causal=False)}
        rec = {"fwd_flops": flops}
        for backend, bench in runs.items():
            try:
                times = bench()
            except Exception as e:  # a baseline that cannot run this shape is reported, not fatal
                rec[backend] = {"error": f"{type(e).__name__}: {e}"[:300]}
                continue
            if times is None:  # cuDNN: documents of different lengths
                continue
            fwd, fwdbwd = times
            rec[backend] = {"fwd_ms": fwd, "fwdbwd_ms": fwdbwd,
                            "fwd_tflops": flops / fwd / 1e9,
                            "fwdbwd_tflops": ba.FWD_BWD_FLOP_FACTOR * flops / fwdbwd / 1e9}
        timed = [b for b in runs if "fwd_ms" in rec.get(b, {})]
        for kind in ("fwd", "fwdbwd"):
            ms, backend = min((rec[b][f"{kind}_ms"], b) for b in timed if b != "flamia")
            rec[f"best_bf16_{kind}"] = backend
            rec[f"speedup_{kind}"] = ms / rec["flamia"][f"{kind}_ms"]
        results[name] = rec
        print(name, {b: (round(rec[b]["fwd_ms"], 3), round(rec[b]["fwdbwd_ms"], 3)) for b in timed},
              {k: v for k, v in rec.items() if k.startswith(("best", "speedup"))}, flush=True)
    Path(opts.json).write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                           "torch": torch.__version__, "causal": False,
                                           "workloads": results}, indent=1))


if __name__ == "__main__":
    main()
