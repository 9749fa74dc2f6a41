#!/usr/bin/env python3
"""The forward with its quantization fused into the kernel against the separate quantize pass,
over document lengths (packed causal documents, 32768 tokens), with FA2 varlen for scale: whether
fusing pays anywhere (it has not: AUTO takes the separate pass on every shape measured, session
14). Both flamia paths give the same outputs bit
for bit (tests/gpu/test_forward_fused_quantize.cpp); times are medians of calls queued back to
back (bench_attention.median_ms).

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python python3 bench/bench_fused_quantize.py \
        --json OUT.json [--lengths 16,64,128] [--head-dim 128]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import (bench_fa2_varlen, bench_flamia_forward, environment,  # noqa: E402
                             forward_flops, make_inputs, median_ms)

TOKENS = 32768


def flamia_fwd_ms(quantize, q, k, v, cu, max_len, scale_mode):
    with environment("FLAMIA_FORWARD_QUANTIZE", quantize):
        return median_ms(lambda: bench_flamia_forward(q, k, v, cu, max_len, scale_mode))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--lengths", default="16,32,64,128,256,512,2048")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads-q", type=int, default=16)
    ap.add_argument("--heads-kv", type=int, default=16)
    ap.add_argument("--scale-modes", default="exact,block32")
    opts = ap.parse_args()
    out = {"device": torch.cuda.get_device_name(), "tokens": TOKENS, "head_dim": opts.head_dim,
           "heads_q": opts.heads_q, "heads_kv": opts.heads_kv, "rows": []}
    print(f"{'doc len':>8s} {'mode':>8s} {'separate':>9s} {'fused':>9s} {'fused/sep':>9s} "
          f"{'fa2':>8s}  (forward ms)")
    for length in (int(x) for x in opts.lengths.split(",")):
        w = {"doc_lens": [length] * (TOKENS // length), "heads_q": opts.heads_q,
             "heads_kv": opts.heads_kv, "head_dim": opts.head_dim}
        q, k, v, d_o, cu, max_len = make_inputs(w)
        fa2 = bench_fa2_varlen(q, k, v, d_o, cu, max_len)[0]
        for mode in opts.scale_modes.split(","):
            sep = flamia_fwd_ms("separate", q, k, v, cu, max_len, mode)
            fused = flamia_fwd_ms("fused", q, k, v, cu, max_len, mode)
            row = {"doc_len": length, "scale_mode": mode, "separate_ms": sep, "fused_ms": fused,
                   "fa2_varlen_ms": fa2,
                   "fwd_flops": forward_flops(w["doc_lens"], opts.heads_q, opts.head_dim)}
            out["rows"].append(row)
            print(f"{length:8d} {mode:>8s} {sep:9.3f} {fused:9.3f} {fused / sep:9.2f} "
                  f"{fa2:8.3f}", flush=True)
    Path(opts.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
