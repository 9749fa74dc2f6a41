#!/usr/bin/env python3
"""Does the ring's NCCL traffic overlap flamia's kernels? (flamia.context_parallel, real ranks)

Under torchrun, one process per GPU: builds a workload of examples/context_parallel/
run_scaling.py, runs a few forward+backward steps of ring_attention, then records one step with
torch.profiler on every rank. Rank 0 writes, per rank: the step's GPU span, the busy time of
the NCCL kernels and of all other kernels, how much of the NCCL time ran while another kernel
ran (overlap), and the longest kernels.

    torchrun --standalone --nproc_per_node=2 tools/probes/cp_overlap.py --workload long_tail \\
        --out /tmp/cp_overlap.json
"""

from __future__ import annotations

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off, before NCCL starts

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples" / "context_parallel"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from flamia.context_parallel import ShardPlan, ring_attention  # noqa: E402
from run_scaling import WORKLOADS  # noqa: E402


def union_length(intervals):
    """Total length covered by a list of (start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def intersection_length(xs, ys):
    """Length of (union of xs) intersected with (union of ys)."""
    return union_length(xs) + union_length(ys) - union_length(xs + ys)


def summarize(prof):
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    nccl = [(e.time_range.start, e.time_range.end) for e in kernels if "nccl" in e.name.lower()]
    other = [(e.time_range.start, e.time_range.end) for e in kernels
             if "nccl" not in e.name.lower()]
    spans = nccl + other
    by_name = {}
    for e in kernels:
        by_name[e.name[:80]] = by_name.get(e.name[:80], 0.0) + (e.time_range.end -
                                                                 e.time_range.start)
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
    ms = 1e-3  # profiler times are in microseconds
    return dict(
        gpu_span_ms=(max(b for _, b in spans) - min(a for a, _ in spans)) * ms if spans else 0,
        nccl_busy_ms=union_length(nccl) * ms, other_busy_ms=union_length(other) * ms,
        nccl_overlapped_ms=intersection_length(nccl, other) * ms,
        top_kernels_ms={n: t * ms for n, t in top})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="long_tail", choices=list(WORKLOADS))
    ap.add_argument("--keep-block-outputs", action="store_true")
    ap.add_argument("--heads-q", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    seqlens = WORKLOADS[a.workload]()
    plan = ShardPlan.build(seqlens, world)
    gen = torch.Generator(device=device).manual_seed(0)
    total = sum(seqlens)

    def randn(heads):
        return torch.randn(total, heads, a.head_dim, generator=gen, device=device).to(
            torch.bfloat16)

    full = dict(q=randn(a.heads_q), k=randn(a.heads_kv), v=randn(a.heads_kv),
                dout=randn(a.heads_q))
    shard = {n: plan.shard(x, rank) for n, x in full.items()}
    q, k, v = (shard[n].requires_grad_() for n in ("q", "k", "v"))

    def step():
        q.grad = k.grad = v.grad = None
        out = ring_attention(q, k, v, plan, keep_block_outputs=a.keep_block_outputs)
        out.backward(shard["dout"])

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    mine = summarize(prof)
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        report = dict(workload=a.workload, world=world, keep_block_outputs=a.keep_block_outputs,
                      nccl=".".join(map(str, torch.cuda.nccl.version())), ranks=gathered)
        pathlib.Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps(report, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
