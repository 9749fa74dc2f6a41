"""Can the numerics contract itself (not a kernel bug) explain the FP8 pretraining divergence?
CPU study with the emulation of fp8_emulation.py (docs/results-log.md, "Divergence investigation").

    # 1. the emulation against float64 on N(0,1) inputs (compare with docs/numerics.md §7/§8)
    python3 examples/pretrain/investigate_divergence.py verify
    # 2. train a small model with plain float attention (or an emulated FP8 variant)
    python3 examples/pretrain/investigate_divergence.py train --attention sdpa --steps 300 \
        --out /tmp/div/sdpa
    # 3. gradient errors of every variant against float64 on one batch of the trained model
    python3 examples/pretrain/investigate_divergence.py errors --checkpoint /tmp/div/sdpa.pt
    # the same on the 63M model (GPU): train.py --save-checkpoint, then
    python3 examples/pretrain/train.py --attention bf16 --seqs-per-step 1 --out-dir /tmp/r \
        --save-checkpoint /tmp/r/bf16.pt
    python3 examples/pretrain/investigate_divergence.py errors --checkpoint /tmp/r/bf16.pt \
        --device cuda --seqs 1 --variants fp8 fp8-block32 fp8-bf16grad fp8-firstkey

Attention variants: sdpa (float), and fp8 variants named
`fp8[-bf16grad][-firstkey][-block32][-fwdonly|-bwdonly][-dcons][-lunq][-qkexact][-pvexact]`
(fwdonly: FP8 forward with the float64 backward; bwdonly: float forward with the FP8 backward;
dcons: D_i = sum_j P_ij dP_ij; lunq: the contract before 2026-11-29 — l sums the unquantized p
and dS uses it, and bf16grad takes D from the FP8 dO and dQ against the raw keys; qkexact: S
from the BF16 q, k; pvexact: O from the FP32 p and BF16 v), plus `bf16` (SDPA in BF16, the
baseline's own error), `bf16-fp8qk` / `bf16-fp8qkv` (BF16 attention on E4M3-rounded operands,
the pretraining backends bf16_fp8qk / bf16_fp8qkv) and `flamia-exact` / `flamia-block32` (the CUDA
kernels, GPU only).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import pathlib
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import attention as attention_backends  # noqa: E402
import data  # noqa: E402
import fp8_emulation as fe  # noqa: E402
from model import Decoder, ModelConfig  # noqa: E402
from train import TrainConfig, lr_at, make_optimizer, to_device  # noqa: E402

# A small CPU model that still has several heads, GQA and multi-hundred-token documents.
# The cpu-tiny shape of train.py (2 layers, 2 query heads, 1 KV head of dim 64), 512-token
# sequences: fast enough on two CPU cores for a few hundred steps.
MODEL = ModelConfig(d_model=128, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=64,
                    ffn_hidden=256, max_positions=512)
TRAIN = TrainConfig(seq_len=512, seqs_per_step=2, steps=300, warmup=30, eval_every=10**9)
VARIANTS_FOR_ERRORS = ("fp8", "fp8-firstkey", "fp8-bf16grad", "fp8-bf16grad-firstkey",
                       "fp8-block32")


def parse_variant(name: str) -> dict:
    """fp8 variant name -> Fp8Config keyword arguments."""
    parts = name.split("-")
    assert parts[0] == "fp8", name
    kw = {}
    rest = "-".join(parts[1:])
    if "bf16grad" in rest:
        kw["precision"] = "fp8-bf16grad"
    if "firstkey" in rest:
        kw["key_smoothing"] = "first_key"
    if "block32" in rest:
        kw["scale_mode"] = "block32"
    if "fwdonly" in rest:
        kw["exact_backward"] = True
    if "bwdonly" in rest:
        kw["exact_forward"] = True
    if "dcons" in rest:
        kw["delta_consistent"] = True
    if "lunq" in rest:
        kw["quantized_denominator"] = False
    if "qkexact" in rest:
        kw["exact_scores"] = True
    if "pvexact" in rest:
        kw["exact_values"] = True
    return kw


def bf16_attention(q, k, v, bounds):
    """BF16 attention (SDPA per document, KV heads repeated: FlashAttention or cuDNN on the GPU;
    the training baseline uses FA2 varlen), float32 out: the baseline's error level."""
    group = q.shape[1] // k.shape[1]
    outs = []
    for s, e in bounds:
        qd, kd, vd = (t[s:e].to(torch.bfloat16).transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
        o = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        outs.append(o.squeeze(0).transpose(0, 1).float())
    return torch.cat(outs, 0)


def study_attention(variant: str, q, k, v, bounds, cu_seqlens):
    """Output of one study variant: bf16, flamia-exact / flamia-block32 (the CUDA kernels, to
    check the emulation on trained activations), or an emulated fp8 variant."""
    if variant == "bf16":
        return bf16_attention(q, k, v, bounds)
    if variant in ("bf16-fp8qk", "bf16-fp8qkv"):  # attention.py's bf16_fp8qk / bf16_fp8qkv
        fq = fe.fake_quantize_per_token
        return bf16_attention(fq(q), fq(k), fq(v) if variant.endswith("v") else v, bounds)
    if variant.startswith("flamia-"):
        import flamia  # the GPU package; only these variants need it

        qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
        length = max(e - s for s, e in bounds)
        return flamia.attn_varlen_func(qb, kb, vb, cu_seqlens, cu_seqlens, length, length,
                                       causal=True, scale_mode=variant[len("flamia-"):]).float()
    return fe.Fp8Attention.apply(q, k, v, bounds, fe.Fp8Config(**parse_variant(variant)))


def make_attend(name: str, device=torch.device("cpu")):
    """(attend, state) for model.py; state holds the document bounds of sdpa."""
    if name == "sdpa":
        attend, _ = attention_backends.make_backend("sdpa", device)
        return attend, attend.state
    return fe.make_attention(**parse_variant(name)), None


def rel_l2(x, ref) -> float:
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


# ---- 1. verification -----------------------------------------------------------------------


def cmd_verify(args):
    torch.manual_seed(0)
    tokens, heads_q, heads_kv, dim = 1024, 4, 2, 128
    bounds = [(0, 17), (17, 600), (600, tokens)]

    def randn(h, bias=0.0):
        return (torch.randn(tokens, h, dim) + bias).bfloat16().float()

    cases = {"N(0,1)": (randn(heads_q), randn(heads_kv), randn(heads_kv))}
    k_bias = randn(heads_kv) + 3.0 * torch.randn(1, heads_kv, dim).bfloat16().float()
    cases["key bias 3 N(0,1)"] = (cases["N(0,1)"][0], k_bias, cases["N(0,1)"][2])
    q, k, v = (t.clone() for t in cases["N(0,1)"])
    for s, _ in bounds:  # a sink: the first key aligned with every query (large logits)
        k[s] = (q[s:s + 64].mean((0, 1)) * 4).bfloat16().float().expand(heads_kv, dim)
    cases["sink first key"] = (q, k, cases["N(0,1)"][2])
    d_out = randn(heads_q)
    for case, (q, k, v) in cases.items():
        qq, kk, vv = (t.double().requires_grad_() for t in (q, k, v))
        ref_o = fe.attention_f64(qq, kk, vv, bounds)
        ref_g = torch.autograd.grad(ref_o, (qq, kk, vv), d_out.double())
        for variant in ("fp8", "fp8-firstkey", "fp8-bf16grad", "fp8-bf16grad-lunq"):
            qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
            o = study_attention(variant, qq, kk, vv, bounds, cu_seqlens=None)
            g = torch.autograd.grad(o, (qq, kk, vv), d_out)
            errs = [rel_l2(o.detach(), ref_o.detach())] + [rel_l2(a, b) for a, b in zip(g, ref_g)]
            print(f"{case:18s} {variant:20s} O {errs[0]:.4f} dQ {errs[1]:.4f} "
                  f"dK {errs[2]:.4f} dV {errs[3]:.4f}")


# ---- 2. training -----------------------------------------------------------------------------


class Capture:
    """Wraps attend to keep the last call's q, k, v (detached) and the gradient of its output,
    per layer (calls are in layer order)."""

    def __init__(self, attend):
        self.attend, self.records = attend, []

    def __call__(self, q, k, v, cu_seqlens, max_seqlen):
        rec = {"q": q.detach().clone(), "k": k.detach().clone(), "v": v.detach().clone(),
               "cu": cu_seqlens.clone()}
        out = self.attend(q, k, v, cu_seqlens, max_seqlen)
        if out.requires_grad:
            out.register_hook(lambda g: rec.__setitem__("do", g.detach().clone()))
        self.records.append(rec)
        return out


def attention_stats(rec, scale) -> dict:
    """Sink and key-component statistics of one layer's q, k (float64 softmax)."""
    cu = rec["cu"].tolist()
    q, k = rec["q"].double(), rec["k"].double()
    group = q.shape[1] // k.shape[1]
    first_mass, max_logit, common = [], [], []
    for s, e in zip(cu[:-1], cu[1:]):
        if e - s < 64:
            continue
        kd = k[s:e].repeat_interleave(group, 1).transpose(0, 1)
        logits = scale * q[s:e].transpose(0, 1) @ kd.transpose(1, 2)
        mask = fe._causal(e - s, e - s, logits.device)
        logits = logits.masked_fill(~mask, -math.inf)
        p = torch.softmax(logits, -1)
        first_mass.append(float(p[:, 32:, 0].mean()))  # attention to BOS, rows past 32
        max_logit.append(float(logits.masked_fill(~mask, 0).abs().amax()))
        kk = k[s + 1:e]  # keys other than BOS: common component |mean| / rms
        common.append(float(kk.mean(0).norm(dim=-1).mean() / kk.norm(dim=-1).mean()))
    mean = lambda x: sum(x) / max(1, len(x))  # noqa: E731
    return {"bos_mass": mean(first_mass), "max_logit": max(max_logit, default=0.0),
            "key_common": mean(common), "bos_key_norm": float(k[cu[0]].norm(dim=-1).mean()),
            "key_norm": float(k.norm(dim=-1).mean()), "q_norm": float(q.norm(dim=-1).mean())}


def cmd_train(args):
    model_cfg = dataclasses.replace(MODEL)
    train_cfg = dataclasses.replace(TRAIN, steps=args.steps, lr=args.lr, seed=args.seed)
    torch.manual_seed(train_cfg.seed)
    torch.set_num_threads(args.threads)
    train_corpus, _, _ = data.load(HERE / "data" / "corpus.npz")
    stream = data.PackedStream(train_corpus, train_cfg.seq_len, train_cfg.seed)
    model = Decoder(model_cfg)
    if args.init:
        state = torch.load(args.init)
        model.load_state_dict(state["model"])
    optimizer = make_optimizer(model, train_cfg, torch.device("cpu"))
    attend, state = make_attend(args.attention)
    device = torch.device("cpu")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scale = 1.0 / math.sqrt(model_cfg.head_dim)
    rows, t0 = [], time.time()
    with open(f"{out}.csv", "w", newline="") as f:
        writer = None
        for step in range(train_cfg.steps):
            batch = to_device(stream.next_batch(train_cfg.seqs_per_step), device)
            tokens, targets, positions, cu_seqlens, max_seqlen = batch
            if state is not None:
                cu = cu_seqlens.tolist()
                state["bounds"] = list(zip(cu[:-1], cu[1:]))
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, train_cfg)
            probe = step % args.stats_every == 0
            fn = Capture(attend) if probe else attend
            logits = model(tokens, positions, cu_seqlens, max_seqlen, fn)
            loss = torch.nn.functional.cross_entropy(logits.float(), targets,
                                                     ignore_index=data.IGNORE)
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                             train_cfg.grad_clip))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            row = {"step": step, "loss": float(loss.detach()), "grad_norm": grad_norm}
            if probe:
                last = attention_stats(fn.records[-1], scale)
                row.update({f"last_{k}": v for k, v in last.items()})
                wqkv = model.blocks[-1].attn.wqkv.weight
                row["last_wqk_norm"] = float(wqkv[: (model_cfg.n_heads + model_cfg.n_kv_heads)
                                                  * model_cfg.head_dim].norm())
            rows.append(row)
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()) + [
                    k for k in ("last_bos_mass",) if k not in rows[0]], extrasaction="ignore")
                writer.writeheader()
            writer.writerow(row)
            f.flush()
            if probe or not math.isfinite(row["loss"]):
                extra = " ".join(f"{k[5:]} {v:.3g}" for k, v in row.items() if k.startswith("last_"))
                print(f"step {step:4d} loss {row['loss']:.4f} gn {grad_norm:.3g} "
                      f"({time.time() - t0:.0f}s) {extra}", flush=True)
            if not math.isfinite(row["loss"]):
                break
    torch.save({"model": model.state_dict(), "step": step, "attention": args.attention,
                "stream_seed": train_cfg.seed}, f"{out}.pt")
    print(json.dumps({"steps": len(rows), "final_loss": sum(r["loss"] for r in rows[-20:]) / min(
        20, len(rows)), "wall_s": time.time() - t0}))


# ---- 3. gradient errors on trained-model inputs ----------------------------------------------


def invariant_error(dk_err, dk_ref, bounds) -> float:
    """|sum over a document's keys of the dK error| / |sum of |dK_ref| rows|: the component of
    the dK error along the loss-invariant direction (adding one vector to every key of a
    document leaves each softmax row unchanged, so the exact sum of dK over keys is 0)."""
    num = den = 0.0
    for s, e in bounds:
        num += float(dk_err[s:e].sum(0).norm() ** 2)
        den += float(dk_ref[s:e].norm(dim=-1).sum() ** 2)
    return math.sqrt(num / max(den, 1e-30))


def capture_layers(args, device):
    """Runs one batch through the checkpoint's model with float attention: per layer the BF16
    q, k, v, dO and cu_seqlens (Capture records), and the softmax scale."""
    ckpt = torch.load(args.checkpoint, map_location=device)
    # train.py --save-checkpoint stores its configs (the h200 model); the study's own train
    # command stores none (the cpu-tiny model).
    model_cfg = ModelConfig(**ckpt["model_config"]) if "model_config" in ckpt else MODEL
    seq_len = ckpt.get("train_config", {}).get("seq_len", TRAIN.seq_len)
    seqs = args.seqs or ckpt.get("train_config", {}).get("seqs_per_step", TRAIN.seqs_per_step)
    model = Decoder(model_cfg).to(device)
    model.load_state_dict(ckpt["model"])
    train_corpus, _, _ = data.load(HERE / "data" / "corpus.npz")
    stream = data.PackedStream(train_corpus, seq_len, args.batch_seed)
    batch = to_device(stream.next_batch(seqs), device)
    tokens, targets, positions, cu_seqlens, max_seqlen = batch
    attend, state = make_attend("sdpa", device)
    cu = cu_seqlens.tolist()
    state["bounds"] = list(zip(cu[:-1], cu[1:]))
    cap = Capture(attend)
    with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):  # as train.py
        logits = model(tokens, positions, cu_seqlens, max_seqlen, cap)
    torch.nn.functional.cross_entropy(logits.float(), targets, ignore_index=data.IGNORE).backward()
    print(f"checkpoint {args.checkpoint} (step {ckpt['step']}), documents "
          f"{[e - s for s, e in state['bounds']]}")
    records = [{n: bf16_round(rec[n]) for n in ("q", "k", "v", "do")} | {"cu": rec["cu"]}
               for rec in cap.records]
    return records, 1.0 / math.sqrt(model_cfg.head_dim)


def truncate_record(rec, tokens: int) -> dict:
    """The record's first `tokens` tokens (a document cut there keeps its prefix: causal
    attention of a prefix needs nothing after it), as BF16 on the CPU."""
    cu = [min(int(c), tokens) for c in rec["cu"].tolist()]
    cu = [c for i, c in enumerate(cu) if i == 0 or c > cu[i - 1]]
    out = {n: rec[n][: cu[-1]].to("cpu", torch.bfloat16) for n in ("q", "k", "v", "do")}
    return out | {"cu": torch.tensor(cu, dtype=torch.int32)}


def dump_layers(records, scale, directory, layers, tokens):
    """One file per layer (layer_NN.pt) of truncated records, for `errors --from-dump` on any
    machine: 2,048 tokens of the h200 model are 8 MiB, under the GPU machine's 16 MiB per file."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for layer in layers:
        rec = truncate_record(records[layer], tokens) | {"scale": scale, "layer": layer}
        torch.save(rec, directory / f"layer_{layer:02d}.pt")


def load_dump(directory, device):
    records, layers, scale = [], [], None
    for path in sorted(pathlib.Path(directory).glob("layer_*.pt")):
        rec = torch.load(path, map_location=device)
        records.append({n: rec[n].float() for n in ("q", "k", "v", "do")} | {"cu": rec["cu"]})
        layers.append(rec["layer"])
        scale = rec["scale"]
    if not records:
        raise SystemExit(f"errors --from-dump: no layer_*.pt in {directory}")
    return records, layers, scale


def cmd_errors(args):
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.from_dump:
        records, layers, scale = load_dump(args.from_dump, device)
    elif args.checkpoint:
        records, scale = capture_layers(args, device)
        layers = list(range(len(records)))
        if args.dump:
            dump_layers(records, scale, args.dump, args.dump_layers or layers, args.dump_tokens)
    else:
        raise SystemExit("errors: give --checkpoint or --from-dump")
    results = []
    for layer, rec in zip(layers, records):
        cu = rec["cu"].to(device)
        bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
        st = attention_stats(rec, scale)
        q, k, v, do = rec["q"], rec["k"], rec["v"], rec["do"]
        do = do * args.do_scale
        q = bf16_round(q * args.q_scale)  # sharper softmax: how errors grow with the logits
        qq, kk, vv = (t.double().requires_grad_() for t in (q, k, v))
        ref_o = fe.attention_f64(qq, kk, vv, bounds)
        ref_g = torch.autograd.grad(ref_o, (qq, kk, vv), do.double())
        print(f"layer {layer}: BOS mass {st['bos_mass']:.3f}, max |logit| {st['max_logit']:.1f}, "
              f"key common/rms {st['key_common']:.2f}, |k| {st['key_norm']:.1f} "
              f"(BOS {st['bos_key_norm']:.1f}), |q| {st['q_norm']:.1f}")
        for variant in args.variants:
            qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
            o = study_attention(variant, qq, kk, vv, bounds, cu)
            g = torch.autograd.grad(o, (qq, kk, vv), do)
            err = {"O": rel_l2(o.detach(), ref_o.detach())}
            err.update({n: rel_l2(a, b) for n, a, b in zip(("dQ", "dK", "dV"), g, ref_g)})
            # Bias: cosine of the dK error with the exact dK (a random error gives ~0).
            e_dk = (g[1].double() - ref_g[1]).flatten()
            err["dK_err_cos"] = float(torch.nn.functional.cosine_similarity(
                e_dk, ref_g[1].flatten(), dim=0))
            err["dK_invariant"] = invariant_error(g[1].double() - ref_g[1], ref_g[1], bounds)
            # BOS rows only: dK of the sink keys
            bos = torch.tensor([s for s, _ in bounds], device=device)
            err["dK_bos"] = rel_l2(g[1][bos], ref_g[1][bos])
            print(f"  {variant:22s} " + " ".join(f"{n} {x:.4f}" for n, x in err.items()))
            results.append({"layer": layer, "variant": variant, **err, **st})
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


def bf16_round(x):
    return x.to(torch.bfloat16).float()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("verify")
    t = sub.add_parser("train")
    t.add_argument("--attention", default="sdpa")
    t.add_argument("--steps", type=int, default=300)
    t.add_argument("--lr", type=float, default=TRAIN.lr)
    t.add_argument("--seed", type=int, default=TRAIN.seed)
    t.add_argument("--init", help="start from this checkpoint's weights (fresh optimizer)")
    t.add_argument("--stats-every", type=int, default=25)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--out", required=True, help="path prefix for .csv and .pt")
    e = sub.add_parser("errors")
    e.add_argument("--checkpoint", help="train.py --save-checkpoint's file")
    e.add_argument("--from-dump", metavar="DIR", help="layers saved by --dump, instead")
    e.add_argument("--dump", metavar="DIR", help="also save the layers' q, k, v, dO there")
    e.add_argument("--dump-layers", type=int, nargs="+", help="which layers (default all)")
    e.add_argument("--dump-tokens", type=int, default=2048, help="first tokens kept per layer")
    e.add_argument("--variants", nargs="+", default=list(VARIANTS_FOR_ERRORS))
    e.add_argument("--batch-seed", type=int, default=99)
    e.add_argument("--do-scale", type=float, default=1.0)
    e.add_argument("--q-scale", type=float, default=1.0, help="multiply q (logit scale)")
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--device", default="cpu", help="cpu, or cuda for the h200 model")
    e.add_argument("--seqs", type=int, help="sequences in the batch (default: the checkpoint's)")
    e.add_argument("--json")
    args = parser.parse_args(argv)
    {"verify": cmd_verify, "train": cmd_train, "errors": cmd_errors}[args.cmd](args)


if __name__ == "__main__":
    main()
