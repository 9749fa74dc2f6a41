"""The pretraining example (examples/pretrain): data packing invariants, the CPU attention
backend against float64, and a few training steps end to end on the CPU."""

from __future__ import annotations

import csv
import json
import math
import sys

import numpy as np
import pytest
import torch

from attention_reference import attention_f64, rel_l2
from conftest import REPO

EXAMPLE = REPO / "examples" / "pretrain"
sys.path.insert(0, str(EXAMPLE))

import attention as backends  # noqa: E402
import data  # noqa: E402


def synthetic_corpus(lengths, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 256, size=sum(lengths), dtype=np.uint8)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return data.Corpus(tokens, offsets)


LENGTHS = [1, 17, 113, 300, 2049, 5, 64, 1000]


def test_packing_invariants():
    corpus = synthetic_corpus(LENGTHS)
    seq_len = 256
    stream = data.PackedStream(corpus, seq_len, seed=3)
    seen_tokens = 0
    for _ in range(20):
        batch = stream.next_batch(2)
        assert batch.inputs.shape == (2 * seq_len,) and batch.targets.shape == batch.inputs.shape
        cu = batch.cu_seqlens
        assert cu.dtype == np.int32 and cu[0] == 0 and cu[-1] == 2 * seq_len
        lengths = np.diff(cu)
        assert (lengths > 0).all() and batch.max_seqlen == lengths.max() <= seq_len
        assert (cu == seq_len).any()  # no piece crosses the sequence boundary
        for start, end in zip(cu[:-1], cu[1:]):
            assert (batch.positions[start:end] == np.arange(end - start)).all()
            # Targets are the next input within the piece; the last one comes from the document.
            assert (batch.targets[start:end - 1] == batch.inputs[start + 1:end]).all()
        seen_tokens += batch.inputs.size
    # BOS starts every document and is never a target (targets are bytes or IGNORE).
    assert not (batch.targets == data.BOS).any()
    assert set(np.unique(batch.targets)) <= set(range(256)) | {data.IGNORE}


def test_every_document_is_read_once_per_epoch():
    corpus = synthetic_corpus(LENGTHS)
    total = sum(n + 1 for n in LENGTHS)  # + BOS per document
    stream = data.PackedStream(corpus, total, seed=5)  # one sequence = exactly one epoch
    inputs, targets, lengths = stream.next_sequence()
    assert (inputs == data.BOS).sum() == len(LENGTHS)
    assert (targets == data.IGNORE).sum() == len(LENGTHS)  # each document's last token
    assert sorted(lengths) == sorted(n + 1 for n in LENGTHS)
    assert stream.epoch == 0


def test_same_seed_same_order():
    corpus = synthetic_corpus(LENGTHS)
    a = data.PackedStream(corpus, 128, seed=9)
    b = data.PackedStream(corpus, 128, seed=9)
    c = data.PackedStream(corpus, 128, seed=10)
    batches = [(a.next_batch(2), b.next_batch(2), c.next_batch(2)) for _ in range(5)]
    assert all(np.array_equal(x.inputs, y.inputs) and np.array_equal(x.cu_seqlens, y.cu_seqlens)
               for x, y, _ in batches)
    assert not all(np.array_equal(x.inputs, z.inputs) for x, _, z in batches)


def test_committed_corpus_is_readable():
    path = EXAMPLE / "data" / "corpus.npz"
    if not path.is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    train, heldout, manifest = data.load(path)
    assert train.n_docs > 1000 and heldout.n_docs > 10
    assert train.offsets[-1] == train.tokens.size == manifest["train"]["tokens"]
    assert heldout.offsets[-1] == heldout.tokens.size
    text = bytes(train.tokens[train.offsets[0]:train.offsets[1]]).decode("utf-8", "replace")
    assert sum(ch.isalpha() for ch in text) > len(text) // 3  # real text, not noise


def test_sdpa_backend_matches_float64():
    torch.manual_seed(0)
    seqlens = [1, 17, 113, 49]
    cu = torch.tensor(np.concatenate(([0], np.cumsum(seqlens))), dtype=torch.int32)
    q = torch.randn(sum(seqlens), 4, 64)
    k = torch.randn(sum(seqlens), 2, 64)
    v = torch.randn(sum(seqlens), 2, 64)
    attend, description = backends.make_backend("sdpa", torch.device("cpu"))
    attend.state["bounds"] = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    out = attend(q, k, v, cu, max(seqlens))
    ref, _ = attention_f64(q, k, v, cu, cu, 1 / math.sqrt(64), True)
    assert rel_l2(out, ref) < 1e-5 and "scaled_dot_product_attention" in description


def test_training_steps_and_summary_on_cpu(tmp_path):
    pytest.importorskip("matplotlib")
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import summarize
    import train

    for name in ("bf16", "sdpa"):  # bf16 falls back to sdpa on the CPU
        result = train.main(["--preset", "cpu-tiny", "--attention", name, "--steps", "3",
                             "--eval-every", "2", "--device", "cpu", "--out-dir",
                             str(tmp_path)])
        assert result["steps"] == 3 and math.isfinite(result["final_train_loss"])
        assert result["final_heldout_loss"] is not None
        assert result["final_train_loss"] < math.log(320) + 0.5  # the model learns something
        rows = list(csv.DictReader(open(tmp_path / f"{name}.csv")))
        evaluated = [r for r in rows if r["heldout_loss"] != ""]
        assert len(evaluated) == 2  # step 1 and the last
        for r in evaluated:  # the FP8 logit-error probe ran on the model's own q and k
            assert 0 < float(r["logit_err_fp8"]) < float(r["logit_rms"])
            assert 0 < float(r["logit_err_fp8_rotated"]) < float(r["logit_rms"])
    report = summarize.summarize(tmp_path, ["bf16", "sdpa"], "bf16", tmp_path / "p.json",
                                 tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "p.json").read_text())
    for key in ("commit", "dataset", "params", "tokens_per_step", "steps", "runs"):
        assert key in saved
    for run in saved["runs"].values():
        for key in ("final_train_loss", "final_heldout_loss", "max_spike", "step_ms",
                    "attention_ms", "csv", "png"):
            assert key in run, key
    # Same seed, same data, same (CPU) attention: identical losses, no spike.
    assert report["runs"]["sdpa"]["final_train_loss"] == report["runs"]["bf16"][
        "final_train_loss"]


def test_logit_error_probe_pairs_and_rotation_gain():
    import logit_error_probe

    cu = torch.tensor([0, 2, 5, 9], dtype=torch.int32)
    mask = logit_error_probe.visible_pairs(cu, 6)  # the probe may cut the last document short
    expected = torch.zeros(6, 6, dtype=torch.bool)
    for start, end in ((0, 2), (2, 5), (5, 6)):
        for i in range(start, end):
            expected[i, start:i + 1] = True
    assert torch.equal(mask, expected)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(200, 4, 64, generator=gen)
    k = torch.randn(200, 2, 64, generator=gen)
    q[..., 5:7] *= 30  # shared outlier channels: the rotation must cut the error
    k[..., 5:7] *= 30
    cu = torch.tensor([0, 150, 200], dtype=torch.int32)
    errors = logit_error_probe.layer_errors(q.bfloat16(), k.bfloat16(), cu)
    assert errors["rotated"] < 0.5 * errors["plain"] < errors["spread"], errors


def write_loss_csv(path, losses, heldout_every=50):
    rows = ["step,loss,heldout_loss"]
    for step, loss in enumerate(losses):
        held = f"{loss * 0.95:.6f}" if step % heldout_every == heldout_every - 1 else ""
        rows.append(f"{step},{loss:.6f},{held}")
    path.write_text("\n".join(rows) + "\n")


def test_summary_reads_baseline_repeats_as_the_noise_floor(tmp_path):
    """A repeat of the baseline 10% below it and a run 1% above: the report gives the repeat's
    ratios against the main baseline and the run's ratio to each baseline run."""
    pytest.importorskip("matplotlib")
    import summarize

    steps = np.arange(400)
    base = 3.0 / (1.0 + steps / 50.0) + 1.0
    (tmp_path / "repeat").mkdir()
    write_loss_csv(tmp_path / "bf16.csv", base)
    write_loss_csv(tmp_path / "flamia_exact.csv", base * 1.01)
    write_loss_csv(tmp_path / "repeat" / "bf16.csv", base * 0.9)
    report = summarize.summarize(tmp_path, ["bf16", "flamia_exact"], "bf16", tmp_path / "p.json",
                                 tmp_path / "p.png", baseline_repeats=[tmp_path / "repeat"])
    repeat = report["baseline_repeats"][0]
    assert repeat["train_vs_baseline"] == pytest.approx(0.9, abs=1e-5)
    assert repeat["heldout_vs_baseline"] == pytest.approx(0.9, abs=1e-5)
    assert repeat["min_spike"] == pytest.approx(0.9, abs=1e-5)
    assert repeat["max_spike"] == pytest.approx(0.9, abs=1e-5)
    rows = report["vs_baseline_runs"]["flamia_exact"]
    assert [r["train"] for r in rows] == pytest.approx([1.01, 1.01 / 0.9], abs=1e-5)
    assert report["runs"]["flamia_exact"]["max_spike"] == pytest.approx(1.01, abs=1e-5)
    assert json.loads((tmp_path / "p.json").read_text())["baseline_repeats"][0]["csv"]


def test_summary_reads_gzipped_csvs_as_plain_ones(tmp_path):
    """bench/results keeps the runs' CSVs gzipped: summarize.py gives the same report from them
    (a run with only DIR/<name>.csv.gz), and a plain CSV is still read first."""
    pytest.importorskip("matplotlib")
    import gzip
    import summarize

    steps = np.arange(300)
    base = 3.0 / (1.0 + steps / 50.0) + 1.0
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    for d in (plain, packed):
        d.mkdir()
        write_loss_csv(d / "bf16.csv", base)
        write_loss_csv(d / "flamia_exact.csv", base * 1.02)
    for name in ("bf16", "flamia_exact"):
        csv_file = packed / f"{name}.csv"
        (packed / f"{name}.csv.gz").write_bytes(gzip.compress(csv_file.read_bytes()))
        csv_file.unlink()
    reports = [summarize.summarize(d, ["bf16", "flamia_exact"], "bf16", d / "p.json", d / "p.png")
               for d in (plain, packed)]
    for key in ("final_train_loss", "final_heldout_loss", "max_spike", "train_vs_baseline"):
        assert reports[0]["runs"]["flamia_exact"][key] == reports[1]["runs"]["flamia_exact"][key]
    assert reports[1]["runs"]["flamia_exact"]["train_vs_baseline"] == pytest.approx(1.02, abs=1e-5)
    assert summarize.run_csv(packed, "bf16").name == "bf16.csv.gz"
    write_loss_csv(packed / "bf16.csv", base)
    assert summarize.run_csv(packed, "bf16").name == "bf16.csv"


def test_summary_gives_each_backends_spread_over_same_seed_repeats(tmp_path):
    """Three runs per backend (the main runs and two replicate directories): each backend's mean,
    standard deviation and standard error, and its mean over the baseline's with that ratio's
    standard error, computed from the final losses (mean of the last 5% of steps)."""
    pytest.importorskip("matplotlib")
    import summarize

    steps = np.arange(400)
    base = 3.0 / (1.0 + steps / 50.0) + 1.0
    factors = {"bf16": (1.0, 0.9, 1.1), "flamia_exact": (1.02, 1.03, 1.04)}
    for k, label in enumerate(("", "repeat1", "repeat2")):
        directory = tmp_path / label
        directory.mkdir(exist_ok=True)
        for name, f in factors.items():
            write_loss_csv(directory / f"{name}.csv", base * f[k])
    report = summarize.summarize(
        tmp_path, list(factors), "bf16", tmp_path / "p.json", tmp_path / "p.png",
        replicates=[("repeat1", tmp_path / "repeat1"), ("repeat2", tmp_path / "repeat2")],
        statistics_at=[200])
    final = summarize.final_loss(base)
    stats = report["backend_statistics"]
    bf16, exact = stats["bf16"]["final_train_loss"], stats["flamia_exact"]["final_train_loss"]
    assert bf16["n"] == exact["n"] == 3
    assert bf16["values"] == pytest.approx([final, 0.9 * final, 1.1 * final], rel=1e-5)
    assert bf16["mean"] == pytest.approx(final, rel=1e-5)
    assert bf16["sd"] == pytest.approx(0.1 * final, rel=1e-4)
    assert exact["se"] == pytest.approx(0.01 * final / math.sqrt(3), rel=1e-3)
    ratio = exact["mean_vs_baseline_mean"]
    assert ratio["ratio"] == pytest.approx(1.03, rel=1e-5)
    assert ratio["se"] == pytest.approx(1.03 * math.hypot(0.01 / 1.03, 0.1) / math.sqrt(3),
                                        rel=1e-3)
    assert "mean_vs_baseline_mean" not in bf16
    spikes = [report["replicates"][k]["flamia_exact"]["max_spike_vs_main_baseline"]
              for k in ("repeat1", "repeat2")]
    assert spikes == pytest.approx([1.03, 1.04], rel=1e-5)
    held = stats["flamia_exact"]["final_heldout_loss"]["mean_vs_baseline_mean"]["ratio"]
    assert held == pytest.approx(1.03, rel=1e-4)
    # as if the runs had ended at step 200: training loss over steps 180..199 (5% of 400), the
    # held-out evaluation at step 199 (steps 49, 99, ...: the last before 200)
    at = report["backend_statistics_at_step"]["200"]
    assert at["train_window"] == [180, 200]
    early = at["backends"]["bf16"]["final_train_loss"]
    assert early["values"] == pytest.approx(
        [f * float(np.mean(base[180:200])) for f in factors["bf16"]], rel=1e-5)
    early_held = at["backends"]["flamia_exact"]["final_heldout_loss"]
    assert early_held["values"] == pytest.approx(
        [f * 0.95 * base[199] for f in factors["flamia_exact"]], rel=1e-5)
    assert early_held["mean_vs_baseline_mean"]["ratio"] == pytest.approx(1.03, rel=1e-4)
    assert json.loads((tmp_path / "p.json").read_text())["backend_statistics"]


def test_resume_leaves_a_finished_run_alone_on_cpu(tmp_path):
    """--resume on a run that already finished (no resume state, its summary complete) returns
    that summary and leaves its CSV as it was, instead of training it again from step 0."""
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import train

    args = ["--preset", "cpu-tiny", "--attention", "sdpa", "--steps", "3", "--eval-every", "2",
            "--device", "cpu", "--out-dir", str(tmp_path)]
    first = train.main(args)
    csv_before = (tmp_path / "sdpa.csv").read_bytes()
    again = train.main(args + ["--resume"])
    assert again["final_train_loss"] == first["final_train_loss"] and again["steps"] == 3
    assert (tmp_path / "sdpa.csv").read_bytes() == csv_before
    longer = train.main(args[:5] + ["4"] + args[6:] + ["--resume"])  # another recipe: trains
    assert longer["steps"] == 4


def test_repeats_script_runs_resumes_and_summarises_on_cpu(tmp_path):
    """examples/pretrain/run_repeats_h200.sh end to end on the CPU (the tiny preset, the two
    PyTorch backends, two runs each): the first call stops every run early, the second resumes
    them, then the CSVs are gathered beside one summary with each backend's spread."""
    pytest.importorskip("matplotlib")
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import os
    import subprocess

    env = dict(os.environ, REPEATS="2", BACKENDS="bf16 sdpa", CARRIED_LIB="1", SEED="7",
               RUNS_ROOT=str(tmp_path / "runs"), RESULTS_DIR=str(tmp_path / "results"),
               TRAIN_ARGS="--preset cpu-tiny --device cpu --steps 4 --eval-every 2 "
                          "--stop-after-steps 3", MAX_MINUTES="5")
    env.pop("OUT", None)
    script = str(EXAMPLE / "run_repeats_h200.sh")
    first = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "continue with RESUME=1" in first.stdout
    assert not (tmp_path / "results" / "pretrain_seed7.json").exists()
    env["RESUME"] = "1"
    second = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    report = json.loads((tmp_path / "results" / "pretrain_seed7.json").read_text())
    for name in ("bf16", "sdpa"):
        stats = report["backend_statistics"][name]["final_train_loss"]
        assert stats["n"] == 2 and all(math.isfinite(v) for v in stats["values"])
    assert report["runs"]["bf16"]["steps"] == 4
    assert (tmp_path / "results" / "pretrain_seed7" / "repeat1" / "sdpa.csv").is_file()
    assert (tmp_path / "results" / "pretrain_seed7.png").stat().st_size > 1000
    assert len(report["baseline_repeats"]) == 1


def test_repeats_script_with_a_tag_and_no_bf16_gathers_the_runs_on_cpu(tmp_path):
    """run_repeats_h200.sh with TAG (run_h200.sh's runs..._TAG directories) and no bf16 among
    BACKENDS: it finds the tagged runs, gathers their CSVs under pretrain<recipe>_TAG/ and, with
    no baseline to compare against, writes no summary and still succeeds."""
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import os
    import subprocess

    env = dict(os.environ, REPEATS="2", BACKENDS="sdpa", CARRIED_LIB="1", SEED="7", TAG="probe",
               RUNS_ROOT=str(tmp_path / "runs"), RESULTS_DIR=str(tmp_path / "results"),
               TRAIN_ARGS="--preset cpu-tiny --device cpu --steps 2 --eval-every 2",
               MAX_MINUTES="5")
    env.pop("OUT", None)
    env.pop("RESUME", None)
    done = subprocess.run(["bash", str(EXAMPLE / "run_repeats_h200.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "runs" / "runs_seed7_repeat1_probe" / "sdpa.csv").is_file()
    collected = tmp_path / "results" / "pretrain_seed7_probe"
    assert (collected / "sdpa.csv").is_file() and (collected / "repeat1" / "sdpa.csv").is_file()
    assert "no bf16 among BACKENDS" in done.stdout
    assert not (tmp_path / "results" / "pretrain_seed7_probe.json").exists()


def test_an_interrupted_run_resumes_bit_for_bit_on_cpu(tmp_path):
    """A run stopped after 3 of 6 steps and resumed (--resume) gives the losses of one
    uninterrupted run: same weights, optimizer state, data order and RNG."""
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import csv
    import train

    common = ["--preset", "cpu-tiny", "--attention", "sdpa", "--steps", "6", "--eval-every", "4",
              "--device", "cpu"]
    whole = train.main(common + ["--out-dir", str(tmp_path / "whole")])
    split = tmp_path / "split"
    first = train.main(common + ["--out-dir", str(split), "--stop-after-steps", "3"])
    assert first["steps"] == 3 and (split / "sdpa.resume.pt").is_file()
    resumed = train.main(common + ["--out-dir", str(split), "--resume"])
    assert resumed["steps"] == 6 and not (split / "sdpa.resume.pt").exists()

    def losses(run_dir):
        with open(run_dir / "sdpa.csv") as f:
            return [(int(r["step"]), r["loss"], r["grad_norm"]) for r in csv.DictReader(f)]

    assert losses(split) == losses(tmp_path / "whole")
    assert resumed["final_train_loss"] == whole["final_train_loss"]
    assert resumed["final_heldout_loss"] == whole["final_heldout_loss"]


@pytest.mark.parametrize("scale_mode", ["exact", "block32"])
@pytest.mark.parametrize("key_smoothing", ["none", "first_key"])
def test_fp8_emulation_forward_is_the_contract(scale_mode, key_smoothing):
    """The study's emulation (fp8_emulation.py) computes the forward of docs/numerics.md bit for
    bit as the tests' contract reference does, so what it says about training is about the
    contract."""
    from attention_reference import contract_forward

    import fp8_emulation as fe

    gen = torch.Generator().manual_seed(3)
    lens = [17, 113, 1, 70]
    total, heads_q, heads_kv, dim = sum(lens), 4, 2, 64
    q, k, v = (torch.randn(total, h, dim, generator=gen).bfloat16()
               for h in (heads_q, heads_kv, heads_kv))
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32)
    scale = 1.0 / math.sqrt(dim)
    attend = fe.make_attention(scale_mode=scale_mode, key_smoothing=key_smoothing)
    out = attend(q.float(), k.float(), v.float(), cu, max(lens))
    want, _ = contract_forward(q, k, v, cu, cu, scale, True, scale_mode, key_smoothing)
    assert torch.equal(out, want.bfloat16().float())


def test_fp8_emulation_ablations_remove_their_error():
    """The study's forward ablations: exact scores and exact values together give float
    attention; either alone still carries the other half's FP8 error."""
    import fp8_emulation as fe

    gen = torch.Generator().manual_seed(5)
    lens = [113, 17, 1]
    total, heads_q, heads_kv, dim = sum(lens), 4, 2, 64
    q, k, v = (torch.randn(total, h, dim, generator=gen).bfloat16().float()
               for h in (heads_q, heads_kv, heads_kv))
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32)
    ref, _ = attention_f64(q, k, v, cu, cu, 1 / math.sqrt(dim), True)

    def error(**ablation):
        return rel_l2(fe.make_attention(**ablation)(q, k, v, cu, max(lens)), ref)

    assert error(exact_scores=True, exact_values=True) < 5e-3  # BF16 output rounding only
    for ablation in ({}, {"exact_scores": True}, {"exact_values": True}):
        assert error(**ablation) > 1e-2, ablation


def test_qk_norm_gives_unit_rms_heads():
    """model.py's QK-norm: every head of q and k reaches attention with RMS 1 (weights at 1;
    RoPE keeps each channel pair's norm), and the default model does not normalise."""
    from model import Decoder, ModelConfig

    cfg = ModelConfig(d_model=64, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=16,
                      ffn_hidden=64, max_positions=64)
    tokens = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(40)
    cu = torch.tensor([0, 23, 40], dtype=torch.int32)
    seen = {}

    def attend(q, k, v, cu_seqlens, max_seqlen):
        seen["q"], seen["k"] = q, k
        return torch.zeros_like(q)

    def head_rms(x):
        return x.float().pow(2).mean(-1).sqrt()

    torch.manual_seed(0)
    Decoder(cfg)(tokens, positions, cu, 23, attend)
    assert (head_rms(seen["q"]) - 1).abs().max() > 0.1
    torch.manual_seed(0)
    Decoder(ModelConfig(**{**cfg.__dict__, "qk_norm": True}))(tokens, positions, cu, 23, attend)
    for name in ("q", "k"):
        assert torch.allclose(head_rms(seen[name]), torch.ones(()), atol=1e-3), name


def test_straight_through_takes_the_value_of_one_and_the_gradient_of_the_other():
    """attention.straight_through (the fp8fwd_bf16bwd / bf16fwd_fp8bwd backends): the output is
    the value backend's exactly, the gradients are the gradient backend's."""
    gen = torch.Generator().manual_seed(2)
    lens = [17, 1, 46]
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32)
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    q, k, v = (torch.randn(sum(lens), h, 16, generator=gen) for h in (4, 2, 2))
    value_attend, _ = backends.make_backend("sdpa", torch.device("cpu"))
    value_attend.state["bounds"] = bounds

    def gradient_attend(q, k, v, cu_seqlens, max_seqlen):  # another function, other gradients
        return backends._sdpa(q * 2, k, v.flip(0), cu_seqlens, max_seqlen, bounds)

    mixed = backends.straight_through(value_attend, gradient_attend)
    assert mixed.state is value_attend.state
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = mixed(*inputs, cu, max(lens))
    assert torch.equal(out, value_attend(q, k, v, cu, max(lens)))
    weights = torch.randn(out.shape, generator=gen)
    got = torch.autograd.grad((out * weights).sum(), inputs)
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad((gradient_attend(*inputs, cu, max(lens)) * weights).sum(), inputs)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="at most one"):
        backends.straight_through(value_attend, value_attend)


def test_error_study_dump_keeps_whole_prefixes(tmp_path):
    """investigate_divergence.py --dump / --from-dump: the first N tokens of each layer, the
    document cut at N kept as its prefix, values unchanged (BF16)."""
    import investigate_divergence as study

    gen = torch.Generator().manual_seed(4)
    cu = torch.tensor([0, 5, 40, 90], dtype=torch.int32)
    layer = [{n: torch.randn(90, h, 8, generator=gen).bfloat16().float()
              for n, h in (("q", 4), ("k", 2), ("v", 2), ("do", 4))} | {"cu": cu}
             for _ in range(2)]
    study.dump_layers(layer, 0.25, tmp_path, [1], tokens=60)
    records, layers, scale = study.load_dump(tmp_path, torch.device("cpu"))
    assert layers == [1] and scale == 0.25 and len(records) == 1
    assert records[0]["cu"].tolist() == [0, 5, 40, 60]
    for name in ("q", "k", "v", "do"):
        assert torch.equal(records[0][name], layer[1][name][:60])
    short = study.truncate_record(layer[0], 40)  # a cut on a boundary adds no empty document
    assert short["cu"].tolist() == [0, 5, 40]

    # the study end to end on the dump: BF16's error is far below FP8's, exact scores help
    study.main(["errors", "--from-dump", str(tmp_path), "--variants", "bf16", "bf16-fp8qk",
                "fp8", "fp8-qkexact", "--json", str(tmp_path / "errors.json")])
    errors = {r["variant"]: r for r in json.loads((tmp_path / "errors.json").read_text())}
    assert set(errors) == {"bf16", "bf16-fp8qk", "fp8", "fp8-qkexact"}
    assert all(r["layer"] == 1 for r in errors.values())
    assert errors["bf16"]["O"] < 0.01 < errors["fp8"]["O"]
    assert errors["bf16"]["dK"] < errors["bf16-fp8qk"]["dK"]


def test_fake_quantized_operands_are_the_contracts_fp8_values():
    """fp8_emulation.fake_quantize_per_token (the bf16_fp8qk / bf16_fp8qkv backends): the value is
    the contract's dequantized E4M3 operand (exact blocks) in BF16 exactly, the gradient the
    identity; the backend runs bf16 attention on those values."""
    import fp8_emulation as fe

    gen = torch.Generator().manual_seed(6)
    x = (torch.randn(50, 3, 64, generator=gen) * torch.logspace(-3, 3, 50).view(50, 1, 1))
    x = x.bfloat16().requires_grad_()
    codes, e = fe.quantize_tokens(x.detach().float(), torch.arange(50))
    want = codes * torch.exp2(e).unsqueeze(2)
    got = fe.fake_quantize_per_token(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got.float(), want)
    assert not torch.equal(got, x.detach())
    weights = torch.randn(x.shape, generator=gen)
    (grad,) = torch.autograd.grad((got.float() * weights).sum(), x)
    assert torch.equal(grad.float(), weights.bfloat16().float())

    lens = [30, 1, 19]
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32)
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    q, k, v = (torch.randn(50, h, 16, generator=gen).bfloat16() for h in (4, 2, 2))
    attend, path = backends.make_backend("bf16_fp8qk", torch.device("cpu"))
    attend.state["bounds"] = bounds
    fq = fe.fake_quantize_per_token
    assert torch.equal(attend(q, k, v, cu, 30), backends._sdpa(fq(q), fq(k), v, cu, 30, bounds))
    assert not torch.equal(attend(q, k, v, cu, 30), backends._sdpa(q, k, v, cu, 30, bounds))
    assert "rounded to E4M3" in path


def test_unsafe_blocks_leak_later_tokens_and_the_safe_scales_do_not():
    """fp8_emulation.fake_quantize_unsafe_blocks (the bf16_unsafe_fp8qkv backend): OCP scales
    over global 32-token blocks, so a token's rounding depends on a later token of its block,
    also across a document boundary; the per-token scales of bf16_fp8qkv never do. The backend's
    attention output at a position moves with a later token only for the unsafe scales."""
    import fp8_emulation as fe

    gen = torch.Generator().manual_seed(11)
    x = torch.randn(70, 2, 16, generator=gen).bfloat16()
    later = x.clone()
    later[20] *= 4096  # the block's new maximum: token 5's values fall to E4M3 subnormals
    unsafe, safe = fe.fake_quantize_unsafe_blocks, fe.fake_quantize_per_token
    assert not torch.equal(unsafe(x)[5], unsafe(later)[5])
    assert torch.equal(safe(x)[5], safe(later)[5])
    assert torch.equal(unsafe(x)[32:], unsafe(later)[32:])  # other blocks: unchanged
    # the OCP rule: the block maximum lands in [256, 512) before E4M3 clamps it to 448
    amax = x[:32].float().abs().amax(dim=(0, 2))
    e = fe.ocp_scale_exponent(amax)
    assert torch.all((amax * torch.exp2(-e) >= 256) & (amax * torch.exp2(-e) < 512))
    assert torch.equal(fe.ocp_scale_exponent(torch.tensor([0.0, float("inf")])),
                       torch.zeros(2))

    lens = [10, 30, 30]  # token 5 (document 0) and token 20 (document 1) share block 0
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32)
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    q, k, v = (torch.randn(70, h, 16, generator=gen).bfloat16() for h in (4, 2, 2))
    k_later = k.clone()
    k_later[20] *= 4096
    for name, leaks in (("bf16_unsafe_fp8qkv", True), ("bf16_fp8qkv", False)):
        attend, path = backends.make_backend(name, torch.device("cpu"))
        attend.state["bounds"] = bounds
        moved = not torch.equal(attend(q, k, v, cu, 30)[5], attend(q, k_later, v, cu, 30)[5])
        assert moved == leaks, name
        assert ("unsafe scales" in path) == leaks, path


def test_heldout_loss_with_a_second_backend_on_cpu(tmp_path):
    """train.py --heldout-attention: every evaluation also with the second backend (CSV column
    heldout_loss_alt, summary final_heldout_loss_alt)."""
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import csv

    import train

    result = train.main(["--preset", "cpu-tiny", "--attention", "bf16_unsafe_fp8qkv", "--steps",
                         "4", "--eval-every", "2", "--device", "cpu", "--heldout-attention",
                         "bf16_fp8qkv", "--out-dir", str(tmp_path)])
    with open(tmp_path / "bf16_unsafe_fp8qkv.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    evaluated = [r for r in rows if r["heldout_loss"]]
    assert [int(r["step"]) for r in evaluated] == [1, 3]
    assert all(math.isfinite(float(r["heldout_loss_alt"])) for r in evaluated)
    assert all(r["heldout_loss_alt"] == "" for r in rows if not r["heldout_loss"])
    assert result["final_heldout_loss_alt"] == float(evaluated[-1]["heldout_loss_alt"])
    assert "unsafe" in result["attention_path"] and "per-token" in result["heldout_attention"]


def test_mixed_backends_compose_flamia_and_bf16(monkeypatch):
    """make_backend's fp8fwd_bf16bwd / bf16fwd_fp8bwd, with a stand-in for the flamia package
    (twice the float attention) so that they run on the CPU: value of one, gradient of the
    other, flamia's explain passed on, and no gradient backend in evaluation."""
    import types

    calls = []

    def fake_flamia(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs):
        calls.append(kwargs)
        cu = cu_q.tolist()
        return 2 * backends._sdpa(q, k, v, cu_q, max_q, list(zip(cu[:-1], cu[1:])))

    monkeypatch.setitem(sys.modules, "flamia", types.SimpleNamespace(
        attn_varlen_func=fake_flamia, explain=lambda *a, **k: "stand-in"))
    gen = torch.Generator().manual_seed(8)
    lens = [9, 20]
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32)
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    q, k, v = (torch.randn(29, h, 8, generator=gen) for h in (2, 1, 1))
    weights = torch.randn(29, 2, 8, generator=gen)

    def value_and_grads(fn):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*inputs, cu, 20)
        return out.detach(), torch.autograd.grad((out * weights).sum(), inputs)

    sdpa = lambda *a: backends._sdpa(*a, bounds)  # noqa: E731
    doubled = lambda *a: 2 * backends._sdpa(*a, bounds)  # noqa: E731
    for name, value_fn, grad_fn in (("fp8fwd_bf16bwd", doubled, sdpa),
                                    ("bf16fwd_fp8bwd", sdpa, doubled)):
        attend, path = backends.make_backend(name, torch.device("cpu"))
        attend.state["bounds"] = bounds
        assert "value: flamia" in path or "gradient: flamia" in path
        assert attend.explain(cu, 20) == "stand-in"
        out, grads = value_and_grads(attend)
        want_out, _ = value_and_grads(value_fn)
        _, want_grads = value_and_grads(grad_fn)
        assert torch.equal(out, want_out)
        for g, w in zip(grads, want_grads):
            assert torch.allclose(g, w, rtol=1e-5, atol=1e-6)
        calls.clear()
        with torch.no_grad():
            attend(q, k, v, cu, 20)
        assert len(calls) == (1 if name == "fp8fwd_bf16bwd" else 0)
        if name == "fp8fwd_bf16bwd":  # (checked here: after the loop `calls` is always empty)
            assert calls[0]["scale_mode"] == "exact", calls


def test_delayed_static_scales_give_each_layer_its_history():
    """flamia_static's delayed scaling: the calls of one step (one cu_seqlens tensor) are the
    layers in order, each with its own flamia.StaticScaleHistory kept across steps (passed to
    the forward, which records its own amax); saturated_heads() totals the layers' saturated
    (tensor, head) pairs of their last calls."""
    import flamia

    scales = backends.DelayedStaticScales(margin=0, history=2)
    step1, step2 = torch.zeros(2), torch.zeros(2)
    layer0, layer1 = scales.history_for(step1), scales.history_for(step1)
    assert isinstance(layer0, flamia.StaticScaleHistory) and layer0 is not layer1
    assert (layer0.margin, layer0.history) == (0, 2)
    assert scales.saturated_heads() == 0  # nothing recorded yet
    assert scales.history_for(step2) is layer0 and scales.history_for(step2) is layer1
    e = torch.tensor([[-6, -6], [0, 0]], dtype=torch.int8)
    layer0._record_forward(torch.tensor([[900.0, 4.0], [2.0, 500.0]]), e)  # K head 0, V head 1
    layer1._record_forward(torch.tensor([[1.0, 1.0], [1.0, 1.0]]), e)
    assert int(scales.saturated_heads()) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="flamia_static trains on an sm_90 (Hopper) GPU")
def test_static_training_logs_saturation(tmp_path):
    """flamia_static's steps log how many (layer, K or V, head) triples its delayed exponents
    saturated, from the forwards' own amax, and the summary totals them (a run's evidence that
    the margin held)."""
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import train

    result = train.main(["--preset", "cpu-tiny", "--attention", "flamia_static", "--steps", "3",
                         "--eval-every", "2", "--device", "cuda", "--out-dir", str(tmp_path)])
    assert result["steps"] == 3 and math.isfinite(result["final_train_loss"])
    rows = list(csv.DictReader(open(tmp_path / "flamia_static.csv")))
    counts = [int(r["saturated_heads"]) for r in rows]
    assert len(counts) == 3 and all(n >= 0 for n in counts)
    assert result["saturated_heads"] == sum(counts)
    assert result["steps_with_saturation"] == sum(n > 0 for n in counts)


def _static_stand_in(monkeypatch):
    """flamia.attn_varlen_func replaced by the float attention (CPU) that treats a
    StaticScaleHistory as the real front does (exponents from the recorded calls, then records
    this call's K and V amax) and whose output depends on the scales it took: the K and V amax
    its exponents came from. Returns the list of (took a history, exponents) per call."""
    import flamia

    calls = []

    def attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, *, static_exponents=None, **kw):
        history = (static_exponents if isinstance(static_exponents, flamia.StaticScaleHistory)
                   else None)
        amax = torch.stack([t.detach().abs().amax(dim=(0, 2)) for t in (k, v)]).float()
        if history is not None:
            recorded = history.recorded_amax()
            bound = torch.stack(recorded).amax(0) if recorded else amax
            e = history._forward_exponents(lambda: k, v)
            history._record_forward(amax, e)
        else:
            bound, e = None, static_exponents
        calls.append((history is not None, e.clone()))
        cu = cu_q.tolist()
        out = backends._sdpa(q, k, v, cu_q, max_q, list(zip(cu[:-1], cu[1:])))
        factor = 1 + 1e-2 * e.float().mean()
        if bound is not None:
            factor = factor + 1e-3 * bound.mean()
        return out * factor

    monkeypatch.setattr(flamia, "attn_varlen_func", attn_varlen_func)
    monkeypatch.setattr(flamia, "explain", lambda *a, **k: "stand-in")
    return calls


def test_static_evaluation_leaves_the_training_history_alone(monkeypatch):
    """flamia_static's held-out evaluation (no gradient) takes the exponents of the layer's last
    training call and records nothing: held-out K and V must not become the scales of the
    training steps that follow (at 16 held-out batches they would replace a 16-step history)."""
    calls = _static_stand_in(monkeypatch)
    attend, _ = backends.make_backend("flamia_static", torch.device("cpu"), heads=(2, 1, 8))
    gen = torch.Generator().manual_seed(3)
    cu = torch.tensor([0, 7, 20], dtype=torch.int32)

    def qkv(scale):
        return [(scale * torch.randn(20, h, 8, generator=gen)).requires_grad_()
                for h in (2, 1, 1)]

    attend(*qkv(1.0), torch.tensor([0, 7, 20], dtype=torch.int32), 13)  # training step 1
    history = attend.static_scales.layers[0]
    assert len(history.recorded_amax()) == 1 and calls[-1][0]
    trained_e = calls[-1][1]
    with torch.no_grad():  # held-out evaluation on much larger K and V
        attend(*qkv(1000.0), cu.clone(), 13)
    took_history, eval_e = calls[-1]
    assert not took_history and torch.equal(eval_e, trained_e)
    assert len(history.recorded_amax()) == 1  # nothing recorded
    attend(*qkv(1.0), cu.clone(), 13)  # training step 2: scales from step 1 alone
    assert torch.equal(calls[-1][1], trained_e)


def test_an_interrupted_static_run_resumes_bit_for_bit_on_cpu(tmp_path, monkeypatch):
    """flamia_static (a CPU stand-in for the kernel) stopped after 2 of 4 steps and resumed
    gives the losses of one uninterrupted run: the resume state keeps each layer's delayed
    scaling history (else the first resumed step would take its scales from its own K and V)."""
    if not (EXAMPLE / "data" / "corpus.npz").is_file():
        pytest.skip("examples/pretrain/data/corpus.npz is not in this checkout")
    import train

    _static_stand_in(monkeypatch)
    common = ["--preset", "cpu-tiny", "--attention", "flamia_static", "--steps", "4",
              "--eval-every", "3", "--device", "cpu"]
    whole = train.main(common + ["--out-dir", str(tmp_path / "whole")])
    split = tmp_path / "split"
    first = train.main(common + ["--out-dir", str(split), "--stop-after-steps", "2"])
    assert first["steps"] == 2 and (split / "flamia_static.resume.pt").is_file()
    resumed = train.main(common + ["--out-dir", str(split), "--resume"])
    assert resumed["steps"] == 4

    def losses(run_dir):
        with open(run_dir / "flamia_static.csv") as f:
            return [(int(r["step"]), r["loss"], r["grad_norm"]) for r in csv.DictReader(f)]

    assert losses(split) == losses(tmp_path / "whole")
    assert resumed["final_heldout_loss"] == whole["final_heldout_loss"]
