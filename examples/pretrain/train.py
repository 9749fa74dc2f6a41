"""Pretrains the Llama-style decoder of model.py on the packed byte-level corpus, with a chosen
attention backend, logging the loss of every step (CSV) and a run summary (JSON).

Every backend starts from the same initial weights (same seed) and sees the same tokens in the
same order, so their loss curves can be compared step by step (summarize.py).

    # on the GPU machine, once per backend (about 4-5 minutes each on one H200):
    python3 examples/pretrain/train.py --attention bf16 --out-dir examples/pretrain/runs
    python3 examples/pretrain/train.py --attention flamia_exact --out-dir examples/pretrain/runs
    python3 examples/pretrain/train.py --attention flamia_block32 --out-dir examples/pretrain/runs
    # a CPU smoke test:
    python3 examples/pretrain/train.py --preset cpu-tiny --attention sdpa --out-dir /tmp/runs
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
if (REPO / "python" / "flamia").is_dir():
    sys.path.insert(0, str(REPO / "python"))

import attention as attention_backends  # noqa: E402
import data  # noqa: E402
import logit_error_probe  # noqa: E402
from model import Decoder, ModelConfig, count_parameters  # noqa: E402


@dataclasses.dataclass
class TrainConfig:
    seq_len: int = 8192
    seqs_per_step: int = 2
    steps: int = 2000
    lr: float = 8e-4
    min_lr_ratio: float = 0.1
    warmup: int = 150
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_sequences: int = 16
    seed: int = 1234
    spike_warmup: int = 150  # steps excluded from spike statistics (summarize.py)


PRESETS = {
    # ~63M parameters, 16k tokens per step: about 3.5 TFLOP per step in matrix products.
    "h200": (ModelConfig(), TrainConfig()),
    # A few seconds per step on two CPU cores: for smoke tests of the script itself.
    "cpu-tiny": (ModelConfig(d_model=128, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=64,
                             ffn_hidden=256, max_positions=512),
                 TrainConfig(seq_len=512, seqs_per_step=2, steps=6, warmup=2, eval_every=3,
                             eval_sequences=2, spike_warmup=2)),
}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("FLAMIA_COMMIT", "unknown")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * lr at the last step."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def make_optimizer(model, cfg: TrainConfig, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2), eps=1e-8,
                             fused=device.type == "cuda")


def to_device(batch: data.Batch, device):
    def put(array, dtype):
        t = torch.from_numpy(np.ascontiguousarray(array)).to(dtype)
        if device.type == "cuda":
            t = t.pin_memory()
        return t.to(device, non_blocking=True)

    return (put(batch.inputs, torch.long), put(batch.targets, torch.long),
            put(batch.positions, torch.long), put(batch.cu_seqlens, torch.int32),
            batch.max_seqlen)


def loss_of(model, batch, device, attend, attend_state):
    tokens, targets, positions, cu_seqlens, max_seqlen = batch
    if attend_state is not None:  # the sdpa backend loops over documents on the host
        cu = cu_seqlens.tolist()
        attend_state["bounds"] = list(zip(cu[:-1], cu[1:]))
    # BF16 autocast on the GPU; FP32 on the CPU, where BF16 matrix products are slow.
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model(tokens, positions, cu_seqlens, max_seqlen, attend)
    return F.cross_entropy(logits.float(), targets, ignore_index=data.IGNORE)


@torch.no_grad()
def heldout_loss(model, batches, device, attend, attend_state) -> float:
    model.eval()
    total = 0.0
    for batch in batches:
        total += loss_of(model, batch, device, attend, attend_state).item()
    model.train()
    return total / len(batches)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench_attention(attend, attend_state, batch, cfg: ModelConfig, device, repeats=10):
    """Forward + backward of one layer's attention on a real batch's documents, in isolation:
    milliseconds per step for all layers (the in-step timer includes launch gaps)."""
    tokens = batch[0].shape[0]
    cu_seqlens, max_seqlen = batch[3], batch[4]
    if attend_state is not None:
        cu = cu_seqlens.tolist()
        attend_state["bounds"] = list(zip(cu[:-1], cu[1:]))
    gen = torch.Generator(device=device).manual_seed(0)

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    def randn(heads):
        return torch.randn(tokens, heads, cfg.head_dim, device=device, generator=gen,
                           dtype=dtype).requires_grad_()

    q, k, v = randn(cfg.n_heads), randn(cfg.n_kv_heads), randn(cfg.n_kv_heads)
    dout = torch.randn_like(q)

    def once():
        out = attend(q, k, v, cu_seqlens, max_seqlen)
        torch.autograd.grad(out, (q, k, v), dout)

    for _ in range(3):
        once()
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        once()
    sync(device)
    return (time.perf_counter() - start) * 1e3 / repeats * cfg.n_layers


def save_resume_state(path, next_step, rows, wall_s, model, optimizer, stream, device,
                      static_scales=None):
    state = {"next_step": next_step, "rows": rows, "wall_s": wall_s,
             "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "stream": stream.state(), "torch_rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
             # flamia_static: the delayed scaling history (else the first resumed step would
             # take its scales from its own K and V)
             "static_scales": static_scales.state() if static_scales is not None else None}
    torch.save(state, path)


def load_resume_state(path, model, optimizer, stream, device, static_scales=None):
    """Restores what save_resume_state wrote; returns (next step, rows so far, wall seconds)."""
    state = torch.load(path, map_location=device, weights_only=False)
    if static_scales is not None and state.get("static_scales") is not None:
        static_scales.load_state(state["static_scales"])
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    stream.load_state(state["stream"])
    torch.set_rng_state(state["torch_rng"].cpu())  # map_location moved it to the device
    if state["cuda_rng"] is not None:
        torch.cuda.set_rng_state(state["cuda_rng"].cpu(), device)
    return state["next_step"], state["rows"], state["wall_s"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attention", required=True, choices=attention_backends.BACKENDS)
    parser.add_argument("--preset", default="h200", choices=sorted(PRESETS))
    parser.add_argument("--data", default=str(HERE / "data" / "corpus.npz"))
    parser.add_argument("--out-dir", default=str(HERE / "runs"))
    parser.add_argument("--steps", type=int, help="override the preset's step count")
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--seqs-per-step", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--eval-every", type=int)
    parser.add_argument("--key-smoothing", default="none", choices=("none", "first_key"),
                        help="flamia key smoothing (first_key: subtract each document's first "
                             "key; reduces the FP8 error when keys share a large component "
                             "or a sink token attracts attention)")
    parser.add_argument("--qk-rotation", default="none", choices=("none", "hadamard"),
                        help="flamia backends: rotate q and k by a randomised Hadamard matrix "
                             "before quantization (flamia.attn_varlen_func's qk_rotation)")
    parser.add_argument("--qk-norm", action="store_true",
                        help="RMSNorm of each head's q and k before RoPE (model.py)")
    parser.add_argument("--precision", default="fp8", choices=("fp8", "fp8-bf16grad"),
                        help="flamia backward precision")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile each block (turns the per-step attention timer off)")
    parser.add_argument("--max-minutes", type=float,
                        help="stop early (writing the summary) after this much training time")
    parser.add_argument("--stop-after-steps", type=int,
                        help="stop early after this many steps of this invocation")
    parser.add_argument("--resume", action="store_true",
                        help="continue from OUT_DIR/ATTENTION.resume.pt if present; a run that "
                             "stops early (--max-minutes, --stop-after-steps) writes that file, "
                             "so a long run can span several device calls with identical results")
    parser.add_argument("--heldout-attention", choices=attention_backends.BACKENDS,
                        help="also evaluate the held-out loss with this backend (CSV column "
                             "heldout_loss_alt), e.g. a leak-free one for a model trained on "
                             "bf16_unsafe_fp8qkv: a model that exploits a leak does worse "
                             "without it")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--save-checkpoint", metavar="PATH",
                        help="when the run completes, save the final weights and both "
                             "configs (for investigate_divergence.py errors)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    model_cfg, train_cfg = (dataclasses.replace(c) for c in PRESETS[args.preset])
    for name in ("steps", "seq_len", "seqs_per_step", "lr", "seed", "eval_every"):
        if getattr(args, name) is not None:
            setattr(train_cfg, name, getattr(args, name))
    model_cfg.max_positions = max(model_cfg.max_positions, train_cfg.seq_len)
    model_cfg.qk_norm = model_cfg.qk_norm or args.qk_norm
    device = torch.device(args.device)
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / f"{args.attention}.csv", out_dir / f"{args.attention}.json"
    resume_path = out_dir / f"{args.attention}.resume.pt"
    if args.resume and not resume_path.is_file() and json_path.is_file():
        # A run that finished in an earlier call: --resume must not start it over (and overwrite
        # its CSV) when the other runs of a side-by-side batch still have steps to go.
        done = json.loads(json_path.read_text())
        if done.get("steps") == train_cfg.steps and not done.get("stopped_early"):
            print(f"{args.attention}: already complete ({json_path}); nothing to resume",
                  flush=True)
            return done

    train_corpus, heldout_corpus, manifest = data.load(args.data)
    stream = data.PackedStream(train_corpus, train_cfg.seq_len, train_cfg.seed)
    heldout_stream = data.PackedStream(heldout_corpus, train_cfg.seq_len, 0, shuffle=False)
    heldout_batches = [to_device(heldout_stream.next_batch(train_cfg.seqs_per_step), device)
                       for _ in range(max(1, train_cfg.eval_sequences
                                          // train_cfg.seqs_per_step))]

    torch.manual_seed(train_cfg.seed)  # identical initial weights for every backend
    model = Decoder(model_cfg).to(device)
    n_params = count_parameters(model)
    optimizer = make_optimizer(model, train_cfg, device)
    heads = (model_cfg.n_heads, model_cfg.n_kv_heads, model_cfg.head_dim)
    attend, description = attention_backends.make_backend(
        args.attention, device, args.precision, heads=heads, key_smoothing=args.key_smoothing,
        qk_rotation=args.qk_rotation)
    attend_state = getattr(attend, "state", None)
    alternative = None  # (attend, state) of --heldout-attention
    if args.heldout_attention:
        alt_attend, alt_description = attention_backends.make_backend(
            args.heldout_attention, device, args.precision, heads=heads,
            key_smoothing=args.key_smoothing, qk_rotation=args.qk_rotation)
        alternative = (alt_attend, getattr(alt_attend, "state", None))
    timer = attention_backends.AttentionTimer(device, enabled=not args.compile)
    probe = logit_error_probe.Capture(attend)  # FP8's logit error on this model, at evaluations
    timed_attend = timer.wrap(probe)
    if args.compile:
        for block in model.blocks:
            block.compile(fullgraph=True)

    tokens_per_step = train_cfg.seq_len * train_cfg.seqs_per_step
    summary = {
        "attention": args.attention, "attention_path": description, "preset": args.preset,
        "model": dataclasses.asdict(model_cfg), "train": dataclasses.asdict(train_cfg),
        "params": n_params, "tokens_per_step": tokens_per_step,
        "dataset": {k: v for k, v in manifest.items() if not k.endswith("_paths")},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__, "commit": git_commit(), "compile": args.compile,
        "csv": str(csv_path),
    }
    if alternative is not None:
        summary["heldout_attention"] = alt_description
    print(f"{args.attention}: {n_params / 1e6:.1f}M parameters, {tokens_per_step} tokens/step, "
          f"{train_cfg.steps} steps; attention: {description}", flush=True)

    columns = ["step", "tokens", "loss", "lr", "grad_norm", "step_ms", "attn_fwd_ms",
               "attn_bwd_ms", "heldout_loss", "max_seqlen", "documents", "logit_err_fp8",
               "logit_err_fp8_rotated", "logit_rms"]
    if alternative is not None:
        columns.append("heldout_loss_alt")
    # flamia_static: the step's (layer, K or V, head) triples with an element beyond its delayed
    # exponent's 448 * 2^e (from the forward's own amax)
    static_scales = getattr(attend, "static_scales", None)
    if static_scales is not None:
        columns.append("saturated_heads")
    rows = []
    first_step, earlier_wall_s = 0, 0.0
    if args.resume and resume_path.is_file():
        first_step, rows, earlier_wall_s = load_resume_state(resume_path, model, optimizer,
                                                             stream, device, static_scales)
        print(f"{args.attention}: resumed at step {first_step}", flush=True)
    started = time.perf_counter()
    stopped_early = None
    with open(csv_path, "a" if first_step else "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        if not first_step:
            writer.writeheader()
        for step in range(first_step, train_cfg.steps):
            batch_np = stream.next_batch(train_cfg.seqs_per_step)
            sync(device)
            t0 = time.perf_counter()
            batch = to_device(batch_np, device)
            lr = lr_at(step, train_cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            timer.reset()
            loss = loss_of(model, batch, device, timed_attend, attend_state)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss_value = loss.item()  # synchronises
            sync(device)
            step_ms = (time.perf_counter() - t0) * 1e3
            fwd_ms, bwd_ms = timer.step_ms()
            if step == 0 and hasattr(attend, "explain"):
                summary["attention_path"] += "; flamia.explain: " + attend.explain(
                    batch[3], batch[4])
                print(summary["attention_path"], flush=True)
            row = {"step": step, "tokens": (step + 1) * tokens_per_step, "loss": loss_value,
                   "lr": lr, "grad_norm": float(grad_norm), "step_ms": step_ms,
                   "attn_fwd_ms": fwd_ms, "attn_bwd_ms": bwd_ms, "heldout_loss": "",
                   "max_seqlen": batch_np.max_seqlen,
                   "documents": len(batch_np.cu_seqlens) - 1, "logit_err_fp8": "",
                   "logit_err_fp8_rotated": "", "logit_rms": ""}
            last = step == train_cfg.steps - 1
            if alternative is not None:
                row["heldout_loss_alt"] = ""
            if static_scales is not None:  # (the loss's .item() synchronised already)
                row["saturated_heads"] = int(static_scales.saturated_heads())
            if (step + 1) % train_cfg.eval_every == 0 or last:
                probe.arm(model_cfg.n_layers)  # the first held-out batch's q and k per layer
                row["heldout_loss"] = heldout_loss(model, heldout_batches, device, timed_attend,
                                                   attend_state)
                row.update(logit_error_probe.summarize(probe.take()))
                if alternative is not None:
                    row["heldout_loss_alt"] = heldout_loss(model, heldout_batches, device,
                                                           *alternative)
            writer.writerow(row)
            f.flush()
            rows.append(row)
            if step % 10 == 0 or row["heldout_loss"] != "":
                held = f" heldout {row['heldout_loss']:.4f}" if row["heldout_loss"] != "" else ""
                print(f"step {step:5d} loss {loss_value:.4f}{held} lr {lr:.2e} "
                      f"{step_ms:7.1f} ms (attention {fwd_ms + bwd_ms:6.1f} ms)", flush=True)
            if not math.isfinite(loss_value):
                stopped_early = f"non-finite loss at step {step}"
                break
            if args.max_minutes and time.perf_counter() - started > args.max_minutes * 60:
                stopped_early = f"time limit after step {step}"
                break
            if args.stop_after_steps and step + 1 - first_step >= args.stop_after_steps:
                stopped_early = f"step limit after step {step}"
                break
    wall_s = earlier_wall_s + time.perf_counter() - started
    resumable = stopped_early is not None and not stopped_early.startswith("non-finite")
    if resumable and len(rows) < train_cfg.steps:
        # saved before the summary's held-out evaluation, which must not change the state
        save_resume_state(resume_path, len(rows), rows, wall_s, model, optimizer, stream, device,
                          static_scales)
        print(f"{args.attention}: state for --resume in {resume_path}", flush=True)
    elif resume_path.is_file():
        resume_path.unlink()
    if stopped_early and rows[-1]["heldout_loss"] == "" and math.isfinite(rows[-1]["loss"]):
        rows[-1]["heldout_loss"] = heldout_loss(model, heldout_batches, device, timed_attend,
                                                attend_state)

    timed = rows[min(10, len(rows) - 1):]  # leave out warm-up steps (allocations, autotuning)
    tail = rows[-max(1, len(rows) // 20):]
    summary.update({
        "steps": len(rows),
        "stopped_early": stopped_early,
        "wall_s": wall_s,
        "final_train_loss": float(np.mean([r["loss"] for r in tail])),
        "final_heldout_loss": next((r["heldout_loss"] for r in reversed(rows)
                                    if r["heldout_loss"] != ""), None),
        "final_heldout_loss_alt": next((r["heldout_loss_alt"] for r in reversed(rows)
                                        if r.get("heldout_loss_alt", "") != ""), None),
        "step_ms": float(np.median([r["step_ms"] for r in timed])),
        "attention_ms": (float(np.median([r["attn_fwd_ms"] + r["attn_bwd_ms"] for r in timed]))
                         if timer.enabled else None),
        "attention_bench_ms": bench_attention(attend, attend_state, batch, model_cfg, device),
    })
    if static_scales is not None:  # resumed rows read back from the CSV hold strings
        saturated = [int(r["saturated_heads"]) for r in rows
                     if r.get("saturated_heads", "") != ""]
        summary["saturated_heads"] = sum(saturated)
        summary["steps_with_saturation"] = sum(n > 0 for n in saturated)
    json_path.write_text(json.dumps(summary, indent=2) + "\n")
    if args.save_checkpoint and len(rows) == train_cfg.steps:  # a stopped run saves none
        torch.save({"model": model.state_dict(), "step": len(rows) - 1,
                    "model_config": dataclasses.asdict(model_cfg),
                    "train_config": dataclasses.asdict(train_cfg)}, args.save_checkpoint)
    print(json.dumps({k: summary[k] for k in ("steps", "final_train_loss", "final_heldout_loss",
                                              "step_ms", "attention_ms",
                                              "attention_bench_ms")}), flush=True)
    return summary


if __name__ == "__main__":
    main()
