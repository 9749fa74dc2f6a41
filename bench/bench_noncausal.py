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
from bench_attention import (FWD_BWD_FLOP_FACTOR, forward_flops,  # noqa: E402
                             kv_for_every_query_head, make_inputs, time_pair, with_grad)

# The public workloads' document mixes, without the causal mask (16 heads of 128, 32k tokens),
# and the extra GQA 8:1 and head-dim-64 shapes.
WORKLOADS = {
    "equal-2k": dict(doc_lens=[2048] * 16, heads_q=16, heads_kv=16, head_dim=128),
    "equal-8k": dict(doc_lens=[8192] * 4, heads_q=16, heads_kv=16, head_dim=128),
    "uniform": dict(doc_lens=[1228, 4790, 7070, 6700, 6384, 644, 2217, 1093, 2642], heads_q=16,
                    heads_kv=16, head_dim=128),
    "equal-4k-gqa8": dict(doc_lens=[4096] * 8, heads_q=32, heads_kv=4, head_dim=128),
    "equal-4k-d64": dict(doc_lens=[4096] * 8, heads_q=32, heads_kv=32, head_dim=64),
}


def flamia_run(q, k, v, d_o, cu, max_len):
    import flamia

    def run(grad):
        qq, kk, vv = with_grad((q, k, v), grad)
        out = flamia.attn_varlen_func(qq, kk, vv, cu, cu, max_len, max_len, causal=False)
        return out, (qq, kk, vv), d_o

    return run


def fa2_run(q, k, v, d_o, cu, max_len):
    from torch.nn.attention.varlen import varlen_attn
    k, v = kv_for_every_query_head(q, k, v)

    def run(grad):
        qq, kk, vv = with_grad((q, k, v), grad)
        return varlen_attn(qq, kk, vv, cu, cu, max_len, max_len,
                           window_size=(-1, -1)), (qq, kk, vv), d_o

    return run


def cudnn_run(q, k, v, d_o, doc_lens):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    if len(set(doc_lens)) != 1:
        return None
    b, L = len(doc_lens), doc_lens[0]

    def bhld(t):
        return t.view(b, L, t.shape[1], t.shape[2]).transpose(1, 2)

    def run(grad):
        qq, kk, vv = with_grad((bhld(q), bhld(k), bhld(v)), grad)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=q.shape[1] != k.shape[1])
        return out, (qq, kk, vv), bhld(d_o)

    return run


def flex_run(q, k, v, d_o, cu):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    compiled = torch.compile(flex_attention, dynamic=False)
    total = q.shape[0]
    doc = torch.zeros(total, dtype=torch.int32, device="cuda")
    doc[cu[1:-1].long()] = 1
    doc = torch.cumsum(doc, 0)
    mask = create_block_mask(lambda b, h, qi, ki: doc[qi] == doc[ki], B=None, H=None,
                             Q_LEN=total, KV_LEN=total)

    def lhd(t):
        return t.transpose(0, 1).unsqueeze(0)

    def run(grad):
        qq, kk, vv = with_grad((lhd(q), lhd(k), lhd(v)), grad)
        out = compiled(qq, kk, vv, block_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
        return out, (qq, kk, vv), lhd(d_o)

    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    opts = ap.parse_args()
    results = {}
    for name in opts.workloads.split(","):
        w = WORKLOADS[name]
        q, k, v, d_o, cu, max_len = make_inputs(w)
        flops = forward_flops(w["doc_lens"], w["heads_q"], w["head_dim"], causal=False)
        runs = {"flamia": flamia_run(q, k, v, d_o, cu, max_len),
                "fa2_varlen": fa2_run(q, k, v, d_o, cu, max_len),
                "cudnn": cudnn_run(q, k, v, d_o, w["doc_lens"]),
                "flex": flex_run(q, k, v, d_o, cu)}
        rec = {"fwd_flops": flops}
        for backend, run in runs.items():
            if run is None:
                continue
            try:
                fwd, fwdbwd = time_pair(run)
            except Exception as e:  # a baseline that cannot run this shape is reported, not fatal
                rec[backend] = {"error": f"{type(e).__name__}: {e}"[:300]}
                continue
            rec[backend] = {"fwd_ms": fwd, "fwdbwd_ms": fwdbwd,
                            "fwd_tflops": flops / fwd / 1e9,
                            "fwdbwd_tflops": FWD_BWD_FLOP_FACTOR * flops / fwdbwd / 1e9}
        best = {kind: min((r[f"{kind}_ms"], b) for b, r in rec.items()
                          if b not in ("fwd_flops", "flamia") and isinstance(r, dict)
                          and f"{kind}_ms" in r) for kind in ("fwd", "fwdbwd")}
        for kind, (ms, backend) in best.items():
            rec[f"best_bf16_{kind}"] = backend
            rec[f"speedup_{kind}"] = ms / rec["flamia"][f"{kind}_ms"]
        results[name] = rec
        print(name, {b: (round(r["fwd_ms"], 3), round(r["fwdbwd_ms"], 3)) for b, r in rec.items()
                     if isinstance(r, dict) and "fwd_ms" in r},
              {k: v for k, v in rec.items() if k.startswith(("best", "speedup"))}, flush=True)
    Path(opts.json).write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                           "torch": torch.__version__, "causal": False,
                                           "workloads": results}, indent=1))


if __name__ == "__main__":
    main()
