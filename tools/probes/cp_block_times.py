#!/usr/bin/env python3
"""Where a ring-attention step's time goes (flamia.context_parallel), on one GPU.

For one workload of examples/context_parallel/run_scaling.py and W simulated ranks, times every
ring block's flamia calls alone (CUDA events, median of 5 after 2 warm-ups): the forward, the
backward, and the backward's extra forward of an off-diagonal block (the dQ correction); prints
them with the block's shape (documents, tokens, visible pairs) beside the plain single-GPU call;
then profiles the whole simulated ring step (all W ranks in one process, so about W times one
rank's work) and lists its CUDA kernels by total time. JSON to --out.

    python3 tools/probes/cp_block_times.py --workload long_tail --world 2 --out /tmp/cp.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples" / "context_parallel"))
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402

from bench_attention import median_ms as bench_median_ms  # noqa: E402
from flamia import context_parallel as cp  # noqa: E402
from run_scaling import WORKLOADS  # noqa: E402


def median_ms(fn, reps=5, warmup=2):
    """Each call timed alone, on an idle GPU (bench_attention.median_ms, per_call)."""
    return bench_median_ms(fn, warmup=warmup, reps=reps, per_call=True)


def visible_pairs(layout):
    if layout.causal:
        return sum(n * (n + 1) // 2 for n in layout.q_lens)
    return sum(a * b for a, b in zip(layout.q_lens, layout.k_lens))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="long_tail", choices=list(WORKLOADS))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--heads-q", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    seqlens = WORKLOADS[a.workload]()
    total, dev = sum(seqlens), torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def randn(heads):
        return torch.randn(total, heads, a.head_dim, generator=gen, device=dev).to(torch.bfloat16)

    q, k, v, dout = randn(a.heads_q), randn(a.heads_kv), randn(a.heads_kv), randn(a.heads_q)
    scale = a.head_dim ** -0.5
    kernel = cp.FlamiaBlockKernel(softmax_scale=scale)
    plan = cp.ShardPlan.build(seqlens, a.world)
    report = dict(workload=a.workload, world=a.world, documents=len(seqlens), blocks=[])

    cu = torch.tensor(cp._cumsum(seqlens), dtype=torch.int32, device=dev)
    out, lse, stats = kernel.forward(q, k, v, cu, cu, max(seqlens), max(seqlens), True)
    report["single_gpu"] = dict(
        pairs=sum(n * (n + 1) // 2 for n in seqlens),
        fwd_ms=median_ms(lambda: kernel.forward(q, k, v, cu, cu, max(seqlens), max(seqlens), True)),
        bwd_ms=median_ms(lambda: kernel.backward(dout, q, k, v, out, lse, stats, cu, cu,
                                                 max(seqlens), max(seqlens), True)))
    print("single GPU:", report["single_gpu"], flush=True)

    shards = {n: [plan.shard(x, r) for r in range(a.world)]
              for n, x in dict(q=q, k=k, v=v, dout=dout).items()}
    for r in range(a.world):
        for s in range(a.world):
            blk = plan.device_block(r, s, dev)
            lay = blk.layout
            qr, ks, vs, dr = shards["q"][r], shards["k"][s], shards["v"][s], shards["dout"][r]

            def fwd():
                return kernel.forward(qr, ks, vs, blk.cu_q, blk.cu_k, blk.max_q, blk.max_k,
                                      lay.causal)

            ob, lb, sb = fwd()
            row = dict(rank=r, source=s, kind=lay.kind, documents=len(lay.q_lens),
                       q_tokens=sum(lay.q_lens), k_tokens=sum(lay.k_lens),
                       pairs=visible_pairs(lay), fwd_ms=median_ms(fwd),
                       bwd_ms=median_ms(lambda: kernel.backward(
                           dr, qr, ks, vs, ob, lb, sb, blk.cu_q, blk.cu_k, blk.max_q, blk.max_k,
                           lay.causal)))
            report["blocks"].append(row)
            print(row, flush=True)

    def ring_step():
        return cp.simulate_ring_attention(plan, shards["q"], shards["k"], shards["v"],
                                          shards["dout"])

    ring_step()
    torch.cuda.synchronize()
    report["simulated_ring_step_ms"] = median_ms(ring_step, reps=3, warmup=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        ring_step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.key_averages():
        if e.device_time_total > 0:
            kernels[e.key[:90]] = dict(calls=e.count, total_ms=e.device_time_total / 1e3)
    top = sorted(kernels.items(), key=lambda kv: -kv[1]["total_ms"])[:25]
    report["simulated_ring_kernels"] = dict(top)
    report["simulated_ring_kernel_ms"] = sum(x["total_ms"] for x in kernels.values())
    print("simulated ring step (all ranks):", report["simulated_ring_step_ms"], "ms; kernels",
          report["simulated_ring_kernel_ms"], "ms", flush=True)
    for name, x in top:
        print(f"  {x['total_ms']:8.3f} ms {x['calls']:5d}  {name}")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
