#!/usr/bin/env python3
"""Scaling of flamia's ring attention (flamia.context_parallel) on 1, 2 and 4 GPUs.

Run on 1 and 2 H200s (nvidia-h200-x2, session 25: bench/results/context_parallel/); 4 GPUs not
yet (no such machine lent). --cpu-smoke checks its logic on CPUs (gloo, tiny shapes, the
pure-PyTorch block kernel instead of flamia's).

Measures forward and forward+backward tokens/s of causal attention for two workloads:
- doc128k: one 131072-token document;
- long_tail: a packed batch of 131072 tokens whose document lengths follow a long-tailed
  distribution (a few long documents, many short ones; fixed seed).
Shape: heads_q 32, heads_kv 8, head_dim 128 (GQA), BF16 inputs, scale_mode exact, FP8 backward
(override with the flags below). Efficiency at N ranks = tokens/s(N) / (N * tokens/s(1)); the
one-rank ring is one flamia call plus the LSE merge, and the plain single-GPU flamia call is
timed alongside it.

    # all world sizes (launches torchrun once per size) and a summary JSON:
    python3 examples/context_parallel/run_scaling.py --out bench/results/context_parallel
    # one world size by hand:
    torchrun --standalone --nproc_per_node=4 examples/context_parallel/run_scaling.py \\
        --worker --out bench/results/context_parallel

    # the script's own logic on CPUs (2 processes over gloo, tiny shapes, no flamia kernels):
    python3 examples/context_parallel/run_scaling.py --cpu-smoke --world-sizes 1 2 --out /tmp/cp

Writes {out}/scaling_w{N}.json per world size and {out}/scaling.json (all sizes, efficiency).
NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set below, before NCCL starts.
"""

from __future__ import annotations

import os

# Before torch.distributed creates any NCCL communicator (and before torchrun's children
# inherit the environment): NVLink SHARP / multicast must stay off on the lent machines.
os.environ["NCCL_NVLS_ENABLE"] = "0"

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "python"))

TOTAL_TOKENS = 131072
LONG_TAIL_MAX = 32768  # longest document of the long-tail batch
LONG_TAIL_MIN = 16
LONG_TAIL_ALPHA = 1.2  # Pareto tail index of document lengths
LONG_TAIL_SEED = 1234
DATA_SEED = 0
DEFAULT_WORLD_SIZES = (1, 2, 4)
SMOKE_TOTAL_TOKENS = 2048  # --cpu-smoke: workloads scaled down to this many tokens
SMOKE_SHAPE = dict(heads_q=4, heads_kv=2, head_dim=16)


def long_tail_seqlens(total=TOTAL_TOKENS, seed=LONG_TAIL_SEED):
    """Deterministic long-tailed document lengths summing to `total` (the same on every rank:
    Python's own generator, no torch)."""
    import random

    rng = random.Random(seed)
    longest = max(1, total * LONG_TAIL_MAX // TOTAL_TOKENS)
    lengths = []
    while sum(lengths) < total:
        n = int(LONG_TAIL_MIN * rng.paretovariate(LONG_TAIL_ALPHA))
        lengths.append(min(max(n, 1), longest, total - sum(lengths)))
    return lengths


WORKLOADS = {
    "doc128k": lambda total=TOTAL_TOKENS: [total],
    "long_tail": lambda total=TOTAL_TOKENS: long_tail_seqlens(total),
}


# ---- worker (one process per GPU, under torchrun) ------------------------------------------------


def _timed(fn, iters, warmup, device):
    """Mean milliseconds of fn() over `iters` runs after `warmup` (CUDA events on the GPU, the
    wall clock on the CPU); the slowest rank's time (all ranks wait for each other at the ring
    exchanges anyway)."""
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if cuda:
        end.record()
        torch.cuda.synchronize()
        elapsed = start.elapsed_time(end)
    else:
        elapsed = (time.perf_counter() - t0) * 1e3
    ms = torch.tensor([elapsed / iters], device=device)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    return float(ms.item())


def _nccl_version() -> str:
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _measure(args, name, seqlens, world, rank, device, dtype, options):
    """One workload on this rank: ring forward and forward+backward times (and, on one GPU,
    the plain flamia call's). Returns the JSON entry."""
    import itertools

    import torch

    import flamia
    from flamia.context_parallel import ShardPlan, ring_attention

    total = sum(seqlens)
    plan = ShardPlan.build(seqlens, world)
    gen = torch.Generator(device=device).manual_seed(DATA_SEED)  # same data on every rank

    def randn(heads):
        return torch.randn(total, heads, args.head_dim, generator=gen, device=device).to(dtype)

    full = dict(q=randn(args.heads_q), k=randn(args.heads_kv), v=randn(args.heads_kv),
                dout=randn(args.heads_q))
    shard = {n: plan.shard(x, rank) for n, x in full.items()}
    q, k, v = (shard[n].requires_grad_() for n in ("q", "k", "v"))

    def forward():
        with torch.no_grad():
            ring_attention(q, k, v, plan, **options)

    def forward_backward():
        q.grad = k.grad = v.grad = None  # time the step, not gradient accumulation
        out = ring_attention(q, k, v, plan, **options)
        out.backward(shard["dout"])

    entry = dict(workload=name, world_size=world, total_tokens=total, documents=len(seqlens),
                 longest_document=max(seqlens),
                 tokens_per_rank=[plan.tokens(r) for r in range(world)],
                 causal_pairs_per_rank=[plan.causal_work(r) for r in range(world)])
    fwd_ms = _timed(forward, args.iters, args.warmup, device)
    step_ms = _timed(forward_backward, args.iters, args.warmup, device)
    entry.update(ring_forward_ms=fwd_ms, ring_step_ms=step_ms,
                 ring_forward_tokens_per_s=total / (fwd_ms / 1e3),
                 ring_step_tokens_per_s=total / (step_ms / 1e3))
    if world == 1 and not args.cpu_smoke:  # the plain single-GPU kernel, for reference
        cu = torch.tensor([0] + list(itertools.accumulate(seqlens)), dtype=torch.int32,
                          device=device)
        fq, fk, fv = (full[n].clone().requires_grad_() for n in ("q", "k", "v"))
        call_options = {n: x for n, x in options.items() if n != "keep_block_outputs"}

        def single_step():
            fq.grad = fk.grad = fv.grad = None
            out = flamia.attn_varlen_func(fq, fk, fv, cu, cu, max(seqlens), max(seqlens),
                                          causal=True, **call_options)
            out.backward(full["dout"])

        single_ms = _timed(single_step, args.iters, args.warmup, device)
        entry.update(single_gpu_step_ms=single_ms,
                     single_gpu_step_tokens_per_s=total / (single_ms / 1e3))
    if not args.cpu_smoke:
        entry["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return entry


def run_worker(args):
    import torch
    import torch.distributed as dist

    from flamia.context_parallel import TorchBlockKernel

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.cpu_smoke:
        device, dtype = torch.device("cpu"), torch.float64
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        options = dict(kernel=TorchBlockKernel(1.0 / args.head_dim ** 0.5))
        total_tokens = SMOKE_TOTAL_TOKENS
    else:
        device, dtype = torch.device("cuda", local_rank), torch.bfloat16
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=device)
        options = dict(scale_mode=args.scale_mode, precision=args.precision,
                       keep_block_outputs=args.keep_block_outputs)
        total_tokens = TOTAL_TOKENS
    rank, world = dist.get_rank(), dist.get_world_size()
    results = []
    for name in args.workloads:
        entry = _measure(args, name, WORKLOADS[name](total_tokens), world, rank, device, dtype,
                         options)
        results.append(entry)
        if rank == 0:
            print(json.dumps(entry), flush=True)
        if not args.cpu_smoke:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    if rank == 0:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = dict(device="cpu smoke test (not a measurement)" if args.cpu_smoke
                    else torch.cuda.get_device_name(),
                    torch=torch.__version__, nccl=None if args.cpu_smoke else _nccl_version(),
                    nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"),
                    heads_q=args.heads_q, heads_kv=args.heads_kv, head_dim=args.head_dim,
                    iters=args.iters, warmup=args.warmup, scale_mode=args.scale_mode,
                    precision=args.precision, keep_block_outputs=args.keep_block_outputs)
        (out / f"scaling_w{world}.json").write_text(json.dumps(dict(meta=meta, results=results),
                                                               indent=2) + "\n")
    dist.destroy_process_group()


# ---- launcher ------------------------------------------------------------------------------------


def summarize(out: pathlib.Path, world_sizes):
    per_world = {}
    for w in world_sizes:
        path = out / f"scaling_w{w}.json"
        if path.exists():
            per_world[w] = json.loads(path.read_text())
    summary = dict(created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                   meta=next(iter(per_world.values()))["meta"] if per_world else None,
                   workloads={})
    base = per_world.get(1)
    for w, data in sorted(per_world.items()):
        for entry in data["results"]:
            rows = summary["workloads"].setdefault(entry["workload"], [])
            row = dict(world_size=w, step_tokens_per_s=entry["ring_step_tokens_per_s"],
                       forward_tokens_per_s=entry["ring_forward_tokens_per_s"],
                       step_ms=entry["ring_step_ms"], forward_ms=entry["ring_forward_ms"])
            if base is not None:
                ref = next(e for e in base["results"] if e["workload"] == entry["workload"])
                row["step_efficiency"] = (entry["ring_step_tokens_per_s"]
                                          / (w * ref["ring_step_tokens_per_s"]))
                row["forward_efficiency"] = (entry["ring_forward_tokens_per_s"]
                                             / (w * ref["ring_forward_tokens_per_s"]))
                if "single_gpu_step_tokens_per_s" in ref:
                    row["step_efficiency_vs_single_gpu_kernel"] = (
                        entry["ring_step_tokens_per_s"]
                        / (w * ref["single_gpu_step_tokens_per_s"]))
            rows.append(row)
    (out / "scaling.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def launch(args):
    import torch

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    available = os.cpu_count() if args.cpu_smoke else torch.cuda.device_count()
    for w in args.world_sizes:
        if w > available:
            print(f"skipping {w} ranks: {available} GPU(s) visible", flush=True)
            continue
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={w}", str(pathlib.Path(__file__).resolve()), "--worker",
               "--out", str(out), "--iters", str(args.iters), "--warmup", str(args.warmup),
               "--heads-q", str(args.heads_q), "--heads-kv", str(args.heads_kv),
               "--head-dim", str(args.head_dim), "--scale-mode", args.scale_mode,
               "--precision", args.precision, "--workloads", *args.workloads]
        if args.keep_block_outputs:
            cmd.append("--keep-block-outputs")
        if args.cpu_smoke:
            cmd.append("--cpu-smoke")
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env=dict(os.environ, NCCL_NVLS_ENABLE="0"))
    print(json.dumps(summarize(out, args.world_sizes), indent=2))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help="run as one torchrun process")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="check the script on CPUs: gloo, tiny shapes, TorchBlockKernel")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "context_parallel"))
    parser.add_argument("--world-sizes", type=int, nargs="+", default=list(DEFAULT_WORLD_SIZES))
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--heads-q", type=int, default=32)
    parser.add_argument("--heads-kv", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--scale-mode", default="exact", choices=("exact", "block32"))
    parser.add_argument("--precision", default="fp8", choices=("fp8", "fp8-bf16grad"))
    parser.add_argument("--keep-block-outputs", action="store_true",
                        help="ring_attention(keep_block_outputs=True): no extra forward per "
                             "off-diagonal block in the backward, W - 1 outputs kept per rank")
    args = parser.parse_args()
    if args.cpu_smoke:
        args.heads_q, args.heads_kv, args.head_dim = (SMOKE_SHAPE[n] for n in SMOKE_SHAPE)
        args.iters, args.warmup = 1, 0
    if args.worker:
        run_worker(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
