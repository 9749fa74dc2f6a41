#!/usr/bin/env python3
"""FlashAttention-4 (the `flash-attn-4` wheel, CuTe DSL kernels; its SM90 path on the H200) as a
BF16 baseline on the public workloads, beside FA2 varlen and cuDNN SDPA in the same process.

FA4's wheels need more than one device call to carry (scripts/fetch-fa4-wheels prepares the
parts); they are unpacked into a folder that this script adds as a site directory (FA4_SITE),
so that the CuTe DSL package's .pth file is read. The timing is bench_attention.py's: medians of
calls queued back to back (median_ms), forward and forward+backward (time_pair). Each workload
also records FA4's output against FA2's (relative L2) as a check that the same causal attention
ran. Prints one line per workload and writes --json.

    FA4_SITE=/tmp/fa4site python3 bench/bench_fa4.py --json OUT.json [--workloads a,b]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import bench_attention as ba  # noqa: E402  (timing and inputs shared with the main benchmark)


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--workloads", default="")
    ap.add_argument("--workloads-file", default=str(ROOT / "bench/workloads.json"))
    opts = ap.parse_args()
    workloads = json.loads(Path(opts.workloads_file).read_text())["workloads"]
    chosen = [n for n in workloads if not opts.workloads or n in opts.workloads.split(",")]
    started = time.time()
    ba.fa4_varlen()  # (imported once here, so that the first workload's time is its own)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "fa4_import_s": round(time.time() - started, 1), "workloads": {}}
    try:
        from importlib.metadata import version
        results["flash_attn_4"] = version("flash-attn-4")
    except Exception:  # a site directory without metadata: the version stays unknown
        pass
    for name in chosen:
        w = workloads[name]
        q, k, v, d_o, cu, max_len = ba.make_inputs(w)
        flops = ba.forward_flops(w["doc_lens"], w["heads_q"], w["head_dim"])
        rec = {"fwd_flops": flops, "baselines": {}, "errors": {}}
        run = ba.fa4_runner(q, k, v, d_o, cu, max_len)
        try:
            first = time.time()
            out = run(False)[0]
            torch.cuda.synchronize()
            rec["fa4_first_call_s"] = round(time.time() - first, 1)  # JIT compile included
            fwd, fb = ba.time_pair(run)
            rec["baselines"]["fa4"] = {"fwd_ms": fwd, "fwdbwd_ms": fb,
                                       "fwd_tflops": flops / fwd / 1e9,
                                       "fwdbwd_tflops": ba.FWD_BWD_FLOP_FACTOR * flops / fb / 1e9}
            from torch.nn.attention.varlen import varlen_attn
            kf, vf = ba.kv_for_every_query_head(q, k, v)
            ref = varlen_attn(q, kf, vf, cu, cu, max_len, max_len, window_size=(-1, 0))
            rec["fa4_out_rel_l2_vs_fa2"] = rel_l2(out, ref)
        except Exception as e:  # reported, not fatal: the other baselines still run
            rec["errors"]["fa4"] = f"{type(e).__name__}: {e}"[:500]
        for bname, bench in (("fa2_varlen", lambda: ba.bench_fa2_varlen(q, k, v, d_o, cu, max_len)),
                             ("cudnn", lambda: ba.bench_cudnn(q, k, v, d_o, w["doc_lens"]))):
            r = ba.run_baseline(bname, bench, rec["errors"])
            if r is not None:
                rec["baselines"][bname] = {"fwd_ms": r[0], "fwdbwd_ms": r[1]}
        results["workloads"][name] = rec
        fa4 = rec["baselines"].get("fa4")
        print(f"{name:17s} fa4 " + (f"fwd {fa4['fwd_ms']:.3f} ms ({fa4['fwd_tflops']:.0f} TF/s) "
                                    f"fwd+bwd {fa4['fwdbwd_ms']:.3f} ms "
                                    f"({fa4['fwdbwd_tflops']:.0f} TF/s)" if fa4 else
                                    rec["errors"].get("fa4", "?")) +
              "; " + ", ".join(f"{b} {x['fwd_ms']:.3f}/{x['fwdbwd_ms']:.3f}"
                               for b, x in rec["baselines"].items() if b != "fa4"), flush=True)
        del q, k, v, d_o
        torch.cuda.empty_cache()
    Path(opts.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
