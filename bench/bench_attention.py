#!/usr/bin/env python3
"""flamia against the BF16 attention kernels users would otherwise pick, in one process.

For every workload of bench/workloads.json (packed causal documents): forward and
forward+backward time of flamia (FP8, quantization included: BF16 in, BF16 out) and of the BF16
baselines available in this PyTorch -- FA2 varlen (torch.nn.attention.varlen.varlen_attn,
causal = window_size (-1, 0)), FlexAttention with a document mask, cuDNN SDPA where every
document has the same length, and FlashAttention-4 where its wheels were carried (FA4_SITE,
scripts/fetch-fa4-wheels) -- plus the FlashAttention-3 anchors of bench/anchors.json
(measured on this H200 model; counted when faster than this run's best). Where the
nvidia-cudnn-frontend wheel was carried (scripts/fetch-baseline-wheels), cuDNN's FP8 forward
kernel on equal-length MHA workloads too, under "fp8_baselines" (not a BF16 baseline). Accuracy against the
CPU reference of the contract comes from `flamia accuracy` on two query heads. Times are
medians of calls queued back to back (median_ms), the best of two rounds whose order alternates
(time_in_rounds), the same for flamia, its variants (options, training forward, operands
quantized again) and every baseline; flamia's per-call times on an idle GPU (its host time
included) are reported beside them.

    FLAMIA_LIBRARY=build/libflamia.so PYTHONPATH=python python3 bench/bench_attention.py \
        --json OUT.json [--workloads equal-2k,uniform] [--no-accuracy]
        [--workloads-file bench/workloads_extra.json]
The accuracy (minutes of CPU reference) can run in a device call of its own: --accuracy-only
--json ACC.json there, then the timing run with --accuracy-from ACC.json. After a change to one
kernel family, --accuracy-parts static --accuracy-base OLD.json re-measures that part alone and
copies the others from OLD.json (each record names the parts it measured).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
FWD_BWD_FLOP_FACTOR = 3.5  # workloads.json convention: fwd+bwd = 3.5 x forward FLOPs
ANCHOR_GPU = "H200"  # the GPU model bench/anchors.json was measured on (its "comment")


def forward_flops(doc_lens, heads_q, head_dim, causal=True, window=0):
    """Forward FLOPs, 4 D Hq per visible (query, key) pair; causal counts L^2 / 2 pairs per
    document (workloads.json), a causal sliding window of W keys L W - W^2 / 2 (W < L)."""
    def pairs(L):
        if causal and 0 < window < L:
            return L * window - window * window / 2
        return L * L * (0.5 if causal else 1.0)
    return sum(4 * pairs(L) * head_dim * heads_q for L in doc_lens)


@contextlib.contextmanager
def environment(name, value):
    """The environment variable `name` set to `value` inside the block, as it was afterwards
    (flamia reads its path switches, e.g. FLAMIA_FORWARD_QUANTIZE, at each call)."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


# Warm-up calls run at least this long (and at least `warmup` calls). 2 s brings the H200 to its
# power cap first, the state of a training step (--warmup-seconds; tools/probes/power_state.py).
WARMUP_MIN_SECONDS = 0.2


def median_ms(fn, warmup=3, reps=15, per_call=False):
    """Median time of fn() in ms, with CUDA events around each call. By default the calls are
    queued back to back (one synchronisation at the end, as in triton's do_bench and in a
    training step, where the host prepares a call while the GPU runs the previous one): a call
    whose host work outlasts the GPU's still shows it as idle GPU time inside its events.
    per_call=True synchronises after every call, so each includes the host time before its
    first kernel (the figure of a call made on an idle GPU). The warm-up lasts at least
    WARMUP_MIN_SECONDS as well as `warmup` calls (a short call's three warm-up calls take
    microseconds); time_in_rounds repeats whole measurements against the rest."""
    start_time = time.perf_counter()
    calls = 0
    while calls < warmup or time.perf_counter() - start_time < WARMUP_MIN_SECONDS:
        fn()
        calls += 1
        if calls >= warmup:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    events = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        if per_call:
            end.synchronize()
        events.append((start, end))
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2]


def all_workloads():
    """The public workloads and the extra ones (bench/workloads_extra.json), by name."""
    found = {}
    for name in ("bench/workloads.json", "bench/workloads_extra.json"):
        found.update(json.loads((ROOT / name).read_text())["workloads"])
    return found


def make_inputs(w, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(w["doc_lens"])
    shape_q = (total, w["heads_q"], w["head_dim"])
    shape_kv = (total, w["heads_kv"], w["head_dim"])
    q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, generator=g)
    d_o = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16, generator=g)
    lens = torch.tensor(w["doc_lens"], dtype=torch.int32)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lens, 0)
    return q, k, v, d_o, cu.cuda(), max(w["doc_lens"])


def add_warmup_argument(parser):
    parser.add_argument("--warmup-seconds", type=float, default=WARMUP_MIN_SECONDS,
                        help="least warm-up before each median (2: the power-capped state of "
                             "a training step)")


def set_warmup(seconds):
    global WARMUP_MIN_SECONDS
    WARMUP_MIN_SECONDS = seconds


def time_pair(run, per_call=False):
    """(fwd_ms, fwdbwd_ms) of run(requires_grad) -> (out, inputs)."""
    fwd = median_ms(lambda: run(False)[0], per_call=per_call)

    def step():
        out, inputs, d_o = run(True)
        out.backward(d_o)
        for t in inputs:
            t.grad = None

    return fwd, median_ms(step, per_call=per_call)


def run_baseline(name, fn, errors):
    try:
        return fn()
    except Exception as e:  # a baseline that cannot run here is reported, not fatal
        errors[name] = f"{type(e).__name__}: {e}"[:300]
        return None


def time_in_rounds(runs, rounds):
    """{name: (fwd_ms, fwdbwd_ms)}, each the best of `rounds` measurements by runs[name]()
    (a time_pair), and {name: error} for the runs that raised (a baseline that cannot run a
    shape is reported, not fatal). The rounds alternate the order (as given, then reversed), so
    that no backend is always timed right after the same neighbour or first after another
    workload: on the H200 one measurement moves by up to 15% with what ran just before
    (session 28: FlashAttention-4's forward on uniform 1.106 ms in one run, 1.265 in the next,
    flamia's 1.651 and 1.519). A run returning None (cuDNN with unequal documents) is left
    out; one that raises in a later round keeps no time from the earlier ones (it is reported as
    failed, not both timed and failed)."""
    best, errors = {}, {}
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            if name in errors:
                continue
            times = run_baseline(name, runs[name], errors)
            if name in errors:
                best.pop(name, None)
            elif times is not None:
                best[name] = tuple(map(min, best[name], times)) if name in best else times
    return best, errors


def with_grad(tensors, requires_grad):
    return [t.detach().requires_grad_(requires_grad) for t in tensors]


def flamia_runner(q, k, v, d_o, cu, max_len, scale_mode="exact", causal=True, **options):
    """run(grad) of flamia's varlen call on the packed documents."""
    import flamia

    def run(grad):
        qq, kk, vv = with_grad((q, k, v), grad)
        out = flamia.attn_varlen_func(qq, kk, vv, cu, cu, max_len, max_len, causal=causal,
                                      scale_mode=scale_mode, **options)
        return out, (qq, kk, vv), d_o

    return run


def bench_flamia(q, k, v, d_o, cu, max_len, scale_mode, per_call=False, causal=True,
                 **options):
    return time_pair(flamia_runner(q, k, v, d_o, cu, max_len, scale_mode, causal, **options),
                     per_call)


def training_forward_ms(q, k, v, cu, max_len, scale_mode):
    """The forward alone with a gradient wanted (what a training step's forward costs)."""
    import flamia

    qq, kk, vv = with_grad((q, k, v), True)
    return median_ms(lambda: flamia.attn_varlen_func(qq, kk, vv, cu, cu, max_len, max_len,
                                                     causal=True, scale_mode=scale_mode))


def requantizing_fwdbwd_ms(q, k, v, d_o, cu, max_len, scale_mode):
    """fwd+bwd with FLAMIA_KEEP_OPERANDS=0: the backward quantizes q, k, v again."""
    with environment("FLAMIA_KEEP_OPERANDS", "0"):
        return bench_flamia(q, k, v, d_o, cu, max_len, scale_mode)[1]


FUSED_QUANTIZE_MAX_SEQLEN = 128  # documents this short also run the fused quantization


def fused_quantize_fwd_ms(q, k, v, cu, max_len, scale_mode):
    """flamia's forward with its quantization fused into the kernel
    (FLAMIA_FORWARD_QUANTIZE=fused; the default is the separate pass, measured faster)."""
    with environment("FLAMIA_FORWARD_QUANTIZE", "fused"):
        return median_ms(lambda: bench_flamia_forward(q, k, v, cu, max_len, scale_mode))


def bench_flamia_forward(q, k, v, cu, max_len, scale_mode):
    import flamia

    return flamia.attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True,
                                   scale_mode=scale_mode)


def kv_for_every_query_head(q, k, v):
    """k, v with each KV head repeated for its query heads (varlen_attn takes equal counts)."""
    group = q.shape[1] // k.shape[1]
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def window_size(causal, window=0):
    """FlashAttention's window_size: causal, with a sliding window of `window` keys (0: none)."""
    return (window - 1 if window > 0 else -1, 0) if causal else (-1, -1)


def bench_fa2_varlen(q, k, v, d_o, cu, max_len, causal=True, window=0):
    from torch.nn.attention.varlen import varlen_attn
    # GQA keys/values are expanded outside the timing
    k_full, v_full = kv_for_every_query_head(q, k, v)
    window = window_size(causal, window)

    def run(grad):
        qq, kk, vv = with_grad((q, k_full, v_full), grad)
        out = varlen_attn(qq, kk, vv, cu, cu, max_len, max_len, window_size=window)
        return out, (qq, kk, vv), d_o

    return time_pair(run)


def fa4_varlen():
    """FlashAttention-4's varlen function (flash-attn-4, CuTe DSL; its SM90 kernels here), from
    the site directory FA4_SITE (scripts/fetch-fa4-wheels and scripts/fa4-unpack carry and unpack
    it: its CuTe DSL package is found through a .pth file, which only a site directory reads).
    Raises where it is not there."""
    if not os.environ.get("FA4_SITE"):
        raise RuntimeError("FA4_SITE not set (scripts/fetch-fa4-wheels)")
    import site
    site.addsitedir(os.environ["FA4_SITE"])
    from flash_attn.cute import flash_attn_varlen_func
    return flash_attn_varlen_func


def fa4_runner(q, k, v, d_o, cu, max_len, causal=True, window=0):
    """run(grad) of FlashAttention-4 on the packed documents (GQA native)."""
    fn = fa4_varlen()
    extra = {"window_size": window_size(causal, window)} if window > 0 else {}

    def run(grad):
        qq, kk, vv = with_grad((q, k, v), grad)
        out = fn(qq, kk, vv, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max_len,
                 max_seqlen_k=max_len, causal=causal, **extra)
        return (out[0] if isinstance(out, tuple) else out), (qq, kk, vv), d_o

    return run


def bench_fa4(q, k, v, d_o, cu, max_len, causal=True, window=0):
    return time_pair(fa4_runner(q, k, v, d_o, cu, max_len, causal, window))


def bench_cudnn(q, k, v, d_o, doc_lens, causal=True):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    if len(set(doc_lens)) != 1:
        return None
    b, L = len(doc_lens), doc_lens[0]

    def bhld(t):
        return t.view(b, L, t.shape[1], t.shape[2]).transpose(1, 2)

    gqa = q.shape[1] != k.shape[1]

    def run(grad):
        qq, kk, vv = with_grad((bhld(q), bhld(k), bhld(v)), grad)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=gqa)
        return out, (qq, kk, vv), bhld(d_o)

    return time_pair(run)


def bench_cudnn_fp8(q, k, v, doc_lens):
    """cuDNN's FP8 attention forward (nvidia-cudnn-frontend's sdpa_fp8; carried as a wheel by
    scripts/fetch-baseline-wheels), where every document has the same length: the kernel alone,
    on operands already in E4M3 (per-tensor unit scales; FP8 output, as Hopper requires), to
    compare with flamia's forward kernel. Returns ms, or None when the shape does not apply."""
    import cudnn
    if len(set(doc_lens)) != 1 or q.shape[1] != k.shape[1]:
        return None
    b, seq, heads, dim = len(doc_lens), doc_lens[0], q.shape[1], q.shape[2]
    e4m3, fp32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    graph = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=fp32,
                          compute_data_type=fp32, handle=handle)
    shape = (b, heads, seq, dim)
    strides = (seq * heads * dim, dim, heads * dim, 1)  # the packed (token, head, dim) layout
    fp8 = {name: t.view(b, seq, heads, dim).to(torch.float8_e4m3fn)
           for name, t in (("q", q), ("k", k), ("v", v))}
    nodes = {name: graph.tensor(name=name, dim=shape, stride=strides, data_type=e4m3)
             for name in fp8}
    scalar_names = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    scalars = {n: graph.tensor(name=n, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=fp32)
               for n in scalar_names}
    out, _, amax_s, amax_o = graph.sdpa_fp8(
        q=nodes["q"], k=nodes["k"], v=nodes["v"], **scalars, generate_stats=False,
        attn_scale=1.0 / math.sqrt(dim), use_causal_mask=True)
    out.set_output(True).set_dim(shape).set_stride(strides).set_data_type(e4m3)
    for amax in (amax_s, amax_o):
        amax.set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(fp32)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    o = torch.empty_like(fp8["q"])
    amax = [torch.empty(1, 1, 1, 1, dtype=torch.float32, device="cuda") for _ in range(2)]
    # P in [0, 1] is stored as E4M3 with scale 448 (and read back with 1/448)
    values = {"descale_q": 1.0, "descale_k": 1.0, "descale_v": 1.0, "descale_s": 1.0 / 448,
              "scale_s": 448.0, "scale_o": 1.0}
    pack = {nodes[n]: fp8[n] for n in fp8}
    pack.update({scalars[n]: torch.full((1, 1, 1, 1), values[n], device="cuda") for n in values})
    pack.update({out: o, amax_s: amax[0], amax_o: amax[1]})
    workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device="cuda")
    return median_ms(lambda: graph.execute(pack, workspace, handle=handle))


_flex_compiled = None


def bench_flex(q, k, v, d_o, cu, causal=True, window=0):
    global _flex_compiled
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    total = q.shape[0]
    doc = torch.zeros(total, dtype=torch.int32, device="cuda")
    doc[cu[1:-1].long()] = 1
    doc = torch.cumsum(doc, 0)

    def same_document(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]

    def document_causal(b, h, q_idx, kv_idx):
        visible = same_document(b, h, q_idx, kv_idx) & (q_idx >= kv_idx)
        return visible & (q_idx - kv_idx < window) if window > 0 else visible

    # compiled: the block mask is built without materialising the dense total x total mask
    # (128 GiB for one 128k-token document)
    mask = create_block_mask(document_causal if causal else same_document, B=None, H=None,
                             Q_LEN=total, KV_LEN=total, _compile=True)
    gqa = q.shape[1] != k.shape[1]

    def lhd(t):
        return t.transpose(0, 1).unsqueeze(0)

    def run(grad):
        qq, kk, vv = with_grad((lhd(q), lhd(k), lhd(v)), grad)
        out = _flex_compiled(qq, kk, vv, block_mask=mask, enable_gqa=gqa)
        return out, (qq, kk, vv), lhd(d_o)

    return time_pair(run)


def accuracy(w, cli, scale_mode, precision="fp8"):
    if not cli.exists():
        return {"error": f"{cli} not built"}
    group = w["heads_q"] // w["heads_kv"]
    # at least two query heads, keeping the workload's GQA ratio
    heads_q, heads_kv = (group, 1) if group > 1 else (2, 2)
    args = [str(cli), "accuracy", "--docs", ",".join(map(str, w["doc_lens"])), "--heads-q",
            str(heads_q), "--heads-kv", str(heads_kv), "--head-dim", str(w["head_dim"]),
            "--scale-mode", scale_mode, "--precision", precision, "--json"]
    start = time.time()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=400)
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": (proc.stderr or proc.stdout)[-500:], "returncode": proc.returncode}
    result["seconds"] = round(time.time() - start, 1)
    return result


# The parts of a workload's accuracy fields: the scale mode asked for (the record's top-level
# fields), fp8-bf16grad's, and static's (at the CLI's exponents: 2^-5 K and V scales for its
# N(0, 1) inputs).
ACCURACY_PARTS = ("scale_mode", "bf16grad", "static")
ACCURACY_PART_KEYS = {"bf16grad": "bf16grad_accuracy", "static": "static_accuracy"}


def accuracy_fields(w, scale_mode, parts=ACCURACY_PARTS, base=None):
    """A workload's accuracy against the CPU reference, as its record's fields. Only `parts` are
    measured; the others are copied from `base` (the same workload's fields of an earlier
    --accuracy-only run), so that a run after a change to one kernel family re-measures only
    what it changed. Such a record names the parts it measured (`accuracy_parts_measured`)."""
    cli = ROOT / "build/flamia"
    fields = {}
    if "scale_mode" in parts:
        fields.update(accuracy(w, cli, scale_mode))
    else:
        fields.update({k: v for k, v in base.items()
                       if k not in ACCURACY_PART_KEYS.values() and k != "accuracy_parts_measured"})
    for part, key in ACCURACY_PART_KEYS.items():
        if part in parts:
            fields[key] = (accuracy(w, cli, scale_mode, "fp8-bf16grad") if part == "bf16grad"
                           else accuracy(w, cli, "static"))
        else:
            fields[key] = base[key]
    if set(parts) != set(ACCURACY_PARTS):
        fields["accuracy_parts_measured"] = [p for p in ACCURACY_PARTS if p in parts]
    return fields


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--workloads", default="")
    ap.add_argument("--workloads-file", default=str(ROOT / "bench/workloads.json"))
    accuracy_source = ap.add_mutually_exclusive_group()
    accuracy_source.add_argument("--no-accuracy", action="store_true")
    accuracy_source.add_argument("--accuracy-only", action="store_true",
                                 help="no timing: each workload's accuracy fields alone (needs "
                                      "no baseline), for a later run's --accuracy-from")
    accuracy_source.add_argument("--accuracy-from", metavar="JSON",
                                 help="take the accuracy fields from an --accuracy-only run's "
                                      "JSON (same scale mode, every workload of this run) "
                                      "instead of measuring them")
    ap.add_argument("--accuracy-parts", default=",".join(ACCURACY_PARTS),
                    help="with --accuracy-only: which parts to measure (of "
                         f"{','.join(ACCURACY_PARTS)}); the others come from --accuracy-base")
    ap.add_argument("--accuracy-base", metavar="JSON",
                    help="with --accuracy-parts: an earlier --accuracy-only run's JSON (same "
                         "scale mode) holding the parts not measured")
    ap.add_argument("--scale-mode", default="exact")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of flamia's and the baselines' timing (best of them)")
    add_warmup_argument(ap)
    opts = ap.parse_args()
    set_warmup(opts.warmup_seconds)
    workloads = json.loads(Path(opts.workloads_file).read_text())["workloads"]
    anchors = json.loads((ROOT / "bench/anchors.json").read_text())["workloads"]
    asked = opts.workloads.split(",") if opts.workloads else list(workloads)
    unknown = [n for n in asked if n not in workloads]
    if unknown:  # (the JSON is written per workload: no selection would leave no file)
        ap.error(f"unknown workloads {unknown} (in {opts.workloads_file}: {list(workloads)})")
    chosen = [n for n in workloads if n in asked]
    def read_accuracy_run(path):
        """An --accuracy-only run's JSON, refused unless of this run's scale mode and holding
        every workload chosen."""
        run = json.loads(Path(path).read_text())
        missing = [n for n in chosen if n not in run.get("workloads", {})]
        if run.get("scale_mode") != opts.scale_mode or missing:
            ap.error(f"{path}: scale mode {run.get('scale_mode')} "
                     f"(this run: {opts.scale_mode}), workloads missing: {missing}")
        return run

    accuracy_from = read_accuracy_run(opts.accuracy_from) if opts.accuracy_from else None
    parts = [p for p in opts.accuracy_parts.split(",") if p]
    if any(p not in ACCURACY_PARTS for p in parts) or not parts:
        ap.error(f"--accuracy-parts {opts.accuracy_parts}: choose from {ACCURACY_PARTS}")
    partial = set(parts) != set(ACCURACY_PARTS)
    if partial and not (opts.accuracy_only and opts.accuracy_base):
        ap.error("--accuracy-parts other than all needs --accuracy-only and --accuracy-base")
    accuracy_base = None
    if opts.accuracy_base:
        if not partial:
            ap.error("--accuracy-base is only read for the parts --accuracy-parts leaves out")
        accuracy_base = read_accuracy_run(opts.accuracy_base)
    if opts.accuracy_only:
        measured = {"scale_mode": opts.scale_mode, "workloads": {}}
        if partial:
            measured["accuracy_base"] = opts.accuracy_base
        for name in chosen:
            base = accuracy_base["workloads"][name] if accuracy_base else None
            measured["workloads"][name] = accuracy_fields(workloads[name], opts.scale_mode,
                                                          parts, base)
            print(f"{name:17s} o_err {measured['workloads'][name].get('o_rel_l2_vs_ref')}",
                  flush=True)
            Path(opts.json).write_text(json.dumps(measured, indent=1))
        return 0
    device = torch.cuda.get_device_name()
    anchors_apply = ANCHOR_GPU in device
    if not anchors_apply:
        print(f"{device}: not an {ANCHOR_GPU}, so bench/anchors.json's rows are not counted")
    results = {"device": device, "torch": torch.__version__,
               "scale_mode": opts.scale_mode, "rounds": opts.rounds,
               "warmup_seconds": opts.warmup_seconds, "anchors_counted": anchors_apply,
               "workloads": {}}
    for name in chosen:
        w = workloads[name]
        q, k, v, d_o, cu, max_len = make_inputs(w)
        flops = forward_flops(w["doc_lens"], w["heads_q"], w["head_dim"])
        rec = {"doc_lens": w["doc_lens"], "heads_q": w["heads_q"], "heads_kv": w["heads_kv"],
               "head_dim": w["head_dim"], "fwd_flops": flops}
        # flamia and the BF16 kernels, the best of opts.rounds rounds in alternating order
        import flamia

        # scale_mode "static": this batch's K and V amax (a delayed-scaling recipe would take an
        # earlier step's; computed once, outside the timed calls)
        static_exponents = flamia.static_exponents(k, v)
        timed, errors = time_in_rounds(
            {"flamia": lambda: bench_flamia(q, k, v, d_o, cu, max_len, opts.scale_mode),
             "flamia_static": lambda: bench_flamia(q, k, v, d_o, cu, max_len, "static",
                                                   static_exponents=static_exponents),
             "fa2_varlen": lambda: bench_fa2_varlen(q, k, v, d_o, cu, max_len),
             "cudnn": lambda: bench_cudnn(q, k, v, d_o, w["doc_lens"]),
             "flex": lambda: bench_flex(q, k, v, d_o, cu),
             "fa4": lambda: bench_fa4(q, k, v, d_o, cu, max_len)}, opts.rounds)
        if "flamia" in errors:
            raise RuntimeError(f"{name}: flamia failed: {errors['flamia']}")
        f_fwd, f_fb = timed.pop("flamia")
        rec["flamia_fwd_ms"], rec["flamia_fwdbwd_ms"] = f_fwd, f_fb
        # scale_mode "static" (K and V one exponent per KV head), beside the mode asked for
        if "flamia_static" in errors:
            raise RuntimeError(f"{name}: flamia static failed: {errors['flamia_static']}")
        rec["flamia_static_fwd_ms"], rec["flamia_static_fwdbwd_ms"] = timed.pop("flamia_static")
        # flamia's variants, set beside flamia's times above in h200.md: the best of as many
        # rounds in alternating order too (one measurement against a best of two would charge
        # each variant the round-to-round noise). "train": the training forward (a gradient
        # wanted: it keeps its quantized Q, K, V for the backward), and fwd+bwd with the
        # backward quantizing q, k, v again (the path before); the backward's options, fwd+bwd
        # ms (issue: report the cost of each); the front's Hadamard rotation of q and k (torch
        # matrix products around the kernels)
        variants = {
            "train": lambda: (training_forward_ms(q, k, v, cu, max_len, opts.scale_mode),
                              requantizing_fwdbwd_ms(q, k, v, d_o, cu, max_len, opts.scale_mode)),
            "fp8-bf16grad": lambda: bench_flamia(q, k, v, d_o, cu, max_len, opts.scale_mode,
                                                 precision="fp8-bf16grad"),
            "deterministic": lambda: bench_flamia(q, k, v, d_o, cu, max_len, opts.scale_mode,
                                                  deterministic=True),
            "qk_rotation=hadamard": lambda: bench_flamia(q, k, v, d_o, cu, max_len,
                                                         opts.scale_mode, qk_rotation="hadamard")}
        if max_len <= FUSED_QUANTIZE_MAX_SEQLEN and w["head_dim"] == 128:
            # short documents: the forward with its quantization fused into the kernel too
            variants["fused_quantize"] = lambda: (fused_quantize_fwd_ms(
                q, k, v, cu, max_len, opts.scale_mode),)
        varied, failed = time_in_rounds(variants, opts.rounds)
        if failed:
            raise RuntimeError(f"{name}: flamia failed: {failed}")
        rec["flamia_fwd_train_ms"], rec["flamia_fwdbwd_requantize_ms"] = varied["train"]
        if "fused_quantize" in varied:
            rec["flamia_fwd_fused_quantize_ms"] = varied["fused_quantize"][0]
        # each call on an idle GPU (host time before the first kernel included)
        rec["flamia_fwd_per_call_ms"], rec["flamia_fwdbwd_per_call_ms"] = bench_flamia(
            q, k, v, d_o, cu, max_len, opts.scale_mode, per_call=True)
        rec["flamia_options_fwdbwd_ms"] = {option: varied[option][1] for option in
                                           ("fp8-bf16grad", "deterministic",
                                            "qk_rotation=hadamard")}
        rec["flamia_options_fwd_ms"] = {"qk_rotation=hadamard": varied["qk_rotation=hadamard"][0]}
        baselines = {b: {"fwd_ms": fwd, "fwdbwd_ms": fb} for b, (fwd, fb) in timed.items()}
        # FP8 baselines (kernel alone; not BF16, so not in best_bf16_*)
        # (its failure reported apart from the BF16 baselines': it is not one of them)
        fp8_errors = {}
        fp8_ms = run_baseline("cudnn_fp8", lambda: bench_cudnn_fp8(q, k, v, w["doc_lens"]),
                              fp8_errors)
        if fp8_ms is not None:
            rec["fp8_baselines"] = {"cudnn_fp8": {"fwd_kernel_ms": fp8_ms}}
        if fp8_errors:
            rec["fp8_baseline_errors"] = fp8_errors
        # anchors (FlashAttention-3 etc. measured on an H200), as ms of this workload; counted
        # only on the GPU model they were measured on (an H100 run is compared with its own
        # baselines alone)
        if anchors_apply:
            for key, label in (("fa3_bf16", "fa3_bf16_anchor"),
                               ("cudnn_bf16", "cudnn_bf16_anchor")):
                a = anchors.get(name, {})
                if f"{key}_fwd_tflops" in a:
                    baselines[label] = {
                        "fwd_ms": flops / a[f"{key}_fwd_tflops"] / 1e9,
                        "fwdbwd_ms": FWD_BWD_FLOP_FACTOR * flops / a[f"{key}_fb_tflops"] / 1e9}
        # (none timed, e.g. off the H200 with every baseline failing: no ratio, the run goes on)
        for phase in ("fwd", "fwdbwd") if baselines else ():
            best = min(baselines, key=lambda b: baselines[b][f"{phase}_ms"])
            rec[f"best_bf16_{phase}_ms"] = baselines[best][f"{phase}_ms"]
            rec[f"best_bf16_{phase}_name"] = best
            rec[f"speedup_{phase}"] = rec[f"best_bf16_{phase}_ms"] / rec[f"flamia_{phase}_ms"]
            rec[f"speedup_static_{phase}"] = (rec[f"best_bf16_{phase}_ms"] /
                                              rec[f"flamia_static_{phase}_ms"])
        rec["flamia_fwd_tflops"] = flops / f_fwd / 1e9
        rec["flamia_fwdbwd_tflops"] = FWD_BWD_FLOP_FACTOR * flops / f_fb / 1e9
        rec["baselines"] = baselines
        if errors:
            rec["baseline_errors"] = errors
        if accuracy_from is not None:
            rec.update(accuracy_from["workloads"][name])
            rec["accuracy_from"] = opts.accuracy_from
        elif not opts.no_accuracy:
            rec.update(accuracy_fields(w, opts.scale_mode))
        results["workloads"][name] = rec
        nan = float("nan")
        print(f"{name:17s} flamia fwd {f_fwd:7.3f} ms ({rec['flamia_fwd_tflops']:5.0f} TF/s) "
              f"x{rec.get('speedup_fwd', nan):.2f} vs {rec.get('best_bf16_fwd_name')}; fwd+bwd "
              f"{f_fb:7.3f} ms ({rec['flamia_fwdbwd_tflops']:5.0f} TF/s) "
              f"x{rec.get('speedup_fwdbwd', nan):.2f} vs {rec.get('best_bf16_fwdbwd_name')}; "
              f"o_err {rec.get('o_rel_l2_vs_ref', nan):.2g}", flush=True)
        print(f"{'':17s} static     {rec['flamia_static_fwd_ms']:7.3f} ms "
              f"x{rec.get('speedup_static_fwd', nan):.2f}; fwd+bwd "
              f"{rec['flamia_static_fwdbwd_ms']:7.3f} ms "
              f"x{rec.get('speedup_static_fwdbwd', nan):.2f}", flush=True)
        del q, k, v, d_o
        torch.cuda.empty_cache()
        # after every workload: a device call that runs out of time keeps the workloads done
        Path(opts.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
