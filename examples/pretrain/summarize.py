"""Summarises the pretraining runs of train.py: a PNG of the loss curves and a JSON of the final
losses, spikes and timings, comparing each run with the BF16 baseline.

    python3 examples/pretrain/summarize.py --runs-dir examples/pretrain/runs \
        --out-json bench/results/pretrain_x1.json --png bench/results/pretrain_x1.png

max_spike: after the warm-up, the largest ratio of a run's smoothed loss to the baseline's
smoothed loss at the same step (the same centred moving average for both). Every run sees the
same batches in the same order, so smoothing both removes the batch-to-batch variation (one
8k-token sequence per step: the BF16 run's own per-step loss is up to 1.9x its moving average),
while a divergence or a lasting spike still shows. `max_step_ratio` keeps the unsmoothed form
(a run's loss at a step over the baseline's smoothed loss), with the baseline's own value for
scale.

Timings: with --timing-dir, step_ms and attention_ms come from the runs there (same backends,
run one after another on an otherwise idle GPU) when the loss runs shared the GPU.

Replicates: `--replicate NAME=DIR` (repeatable) adds the same runs from DIR (another seed, or a
repeat) under "replicates", with each flamia run's final losses relative to that directory's own
baseline, and the mean of those ratios over the main runs and every replicate. For repeats of
one seed, where pairing a run with "its" baseline run means nothing, "backend_statistics" gives
each backend's final losses over all its runs (mean, standard deviation, standard error) and
the ratio of its mean to the baseline's mean with the standard error of that ratio;
`--statistics-at STEP` adds the same as if the runs had ended at STEP (the training loss over
the window of steps before it, the last held-out evaluation before it). The plot draws the
replicates in their backend's colour, one line style per replicate.

Baseline repeats: `--baseline-repeat DIR` (repeatable) adds DIR's run of the baseline backend,
trained with the same seed on the same data (only the baseline kernels' nondeterminism differs),
under "baseline_repeats": its final losses and spike ratios against the main baseline run, the
noise floor any other run's ratio has to be read against. "vs_baseline_runs" gives every run's
final losses relative to each baseline run (the main one and the repeats). The plot draws the
repeats dashed.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import pathlib
import subprocess

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_RUNS = ("bf16", "flamia_exact", "flamia_block32")
SMOOTH_WINDOW = 51  # steps in the centred moving average of the baseline
FINAL_FRACTION = 0.05  # final_train_loss: mean over the last 5% of steps
REPLICATE_STYLES = ("--", ":", "-.")  # line styles of the replicates in the plot
SPIKE_WARMUP_DEFAULT = 150  # train.py's spike_warmup, for replicates without metadata


def run_csv(directory, name):
    """DIR/<name>.csv, or its gzipped copy DIR/<name>.csv.gz (how bench/results keeps them)."""
    path = pathlib.Path(directory) / f"{name}.csv"
    gzipped = path.with_name(path.name + ".gz")
    return gzipped if not path.is_file() and gzipped.is_file() else path


def read_csv(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.DictReader(f))
    steps = np.array([int(r["step"]) for r in rows])
    loss = np.array([float(r["loss"]) for r in rows])
    held = [(int(r["step"]), float(r["heldout_loss"])) for r in rows if r["heldout_loss"]]
    return steps, loss, held


def smooth(values, window=SMOOTH_WINDOW):
    """Centred moving average; the window shrinks at the ends."""
    half = window // 2
    csum = np.concatenate(([0.0], np.cumsum(values)))
    idx = np.arange(len(values))
    lo, hi = np.maximum(0, idx - half), np.minimum(len(values), idx + half + 1)
    return (csum[hi] - csum[lo]) / (hi - lo)


def rel(path):
    try:
        return str(pathlib.Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def git_commit():
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def final_loss(loss):
    """final_train_loss: the mean over the last FINAL_FRACTION of the steps."""
    return float(np.mean(loss[-max(1, int(round(len(loss) * FINAL_FRACTION))):]))


def spike_ratio(loss, base_loss):
    """The run's smoothed loss over the baseline's, step by step (the common length)."""
    n = min(len(loss), len(base_loss))
    return smooth(loss[:n]) / smooth(base_loss[:n])


def spike_warmup(meta):
    return int(meta.get("train", {}).get("spike_warmup", SPIKE_WARMUP_DEFAULT))


def after_warmup(ratio, warmup):
    """The steps of a ratio curve from the end of the warm-up (at least its last step)."""
    return ratio[min(warmup, max(0, len(ratio) - 1)):]


def loss_ratios(run, base):
    """{"train", "heldout"}: a run's final losses over a baseline run's (held-out where both
    have one)."""
    ratios = {"train": run["final_train_loss"] / base["final_train_loss"]}
    if run["final_heldout_loss"] is not None and base["final_heldout_loss"]:
        ratios["heldout"] = run["final_heldout_loss"] / base["final_heldout_loss"]
    return ratios


def add_baseline_ratios(results, baseline):
    """train_vs_baseline and heldout_vs_baseline for every run of `results`."""
    for r in results.values():
        for key, value in loss_ratios(r, results[baseline]).items():
            r[f"{key}_vs_baseline"] = value


def final_losses(path):
    """The final losses of the run in CSV `path`, and its curves (steps, loss, held-out)."""
    steps, loss, held = read_csv(path)
    summary = {"final_train_loss": final_loss(loss),
               "final_heldout_loss": held[-1][1] if held else None,
               "steps": int(len(steps)), "csv": rel(path)}
    return summary, (steps, loss, held)


def losses_at(path, step, window):
    """The run's losses as if it had ended at `step`: the training loss's mean over the `window`
    steps before it, the last held-out evaluation before it (an earlier point of a longer run,
    e.g. the end of a first pass over the data)."""
    steps, loss, held = read_csv(path)
    before = loss[(steps >= step - window) & (steps < step)]
    earlier = [v for s, v in held if s < step]
    return {"final_train_loss": float(np.mean(before)) if len(before) else None,
            "final_heldout_loss": earlier[-1] if earlier else None}


def statistics_at_step(step, window, run_dirs, names, baseline):
    """backend_statistics of every run (one directory per run set) as if it had ended at
    `step`."""
    run_sets = []
    for directory in run_dirs:
        paths = {name: run_csv(directory, name) for name in names}
        run_sets.append({name: losses_at(path, step, window)
                         for name, path in paths.items() if path.is_file()})
    for run_set in run_sets:  # a run too short for the window counts as missing
        for name in [n for n, r in run_set.items() if r["final_train_loss"] is None]:
            del run_set[name]
    stats = backend_statistics(run_sets, names, baseline)
    return {"train_window": [step - window, step], "heldout_before": step, "backends": stats}


def run_ratios(runs_dir, names, baseline, main_base_loss=None, main_warmup=None):
    """{name: {final losses, ratios to the baseline of the same directory}} for one replicate;
    with the main baseline run's losses also max_spike_vs_main_baseline (same-seed repeats)."""
    runs_dir = pathlib.Path(runs_dir)
    out, losses = {}, {}
    for name in names:
        path = run_csv(runs_dir, name)
        if path.is_file():
            out[name], (_, losses[name], _) = final_losses(path)
    if baseline in out:
        meta_path = runs_dir / f"{baseline}.json"
        warmup = spike_warmup(json.loads(meta_path.read_text()) if meta_path.is_file() else {})
        add_baseline_ratios(out, baseline)
        for name, r in out.items():
            ratio = after_warmup(spike_ratio(losses[name], losses[baseline]), warmup)
            r["max_spike"] = float(np.max(ratio))
    if main_base_loss is not None:
        for name, r in out.items():
            ratio = after_warmup(spike_ratio(losses[name], main_base_loss), main_warmup)
            r["max_spike_vs_main_baseline"] = float(np.max(ratio))
    return out


def baseline_repeat(path, baseline, base_loss, base_result, warmup):
    """One repeat of the baseline run (DIR/<baseline>.csv) against the main baseline run."""
    out, curves = final_losses(run_csv(path, baseline))
    ratio = after_warmup(spike_ratio(curves[1], base_loss), warmup)
    out.update(max_spike=float(np.max(ratio)), min_spike=float(np.min(ratio)))
    out.update({f"{key}_vs_baseline": v for key, v in loss_ratios(out, base_result).items()})
    return out, curves


def mean_and_spread(values):
    """{"values", "mean", "sd", "se", "n"} of a list of final losses (sd with n - 1)."""
    values = [float(v) for v in values]
    n = len(values)
    sd = float(np.std(values, ddof=1)) if n > 1 else None
    return {"values": values, "mean": float(np.mean(values)), "sd": sd,
            "se": sd / np.sqrt(n) if sd is not None else None, "n": n}


def backend_statistics(run_sets, names, baseline):
    """Per backend, over every run set (the main runs and each replicate): its final losses'
    mean and spread, and mean / baseline mean with the ratio's standard error (first order:
    the relative standard errors added in quadrature)."""
    stats = {}
    for name in names:
        stats[name] = {}
        for key in ("final_train_loss", "final_heldout_loss"):
            values = [s[name][key] for s in run_sets if name in s and s[name][key] is not None]
            if values:
                stats[name][key] = mean_and_spread(values)
    base = stats.get(baseline, {})
    for name in names:
        for key, st in stats[name].items():
            if name == baseline or key not in base:
                continue
            b = base[key]
            ratio = st["mean"] / b["mean"]
            se = None
            if st["se"] is not None and b["se"] is not None:
                se = ratio * float(np.hypot(st["se"] / st["mean"], b["se"] / b["mean"]))
            st["mean_vs_baseline_mean"] = {"ratio": ratio, "se": se}
    return stats


def ratios_to_baseline_runs(results, baseline, repeats):
    """{run: [{baseline run csv, train ratio, held-out ratio}]} over every baseline run."""
    bases = [results[baseline]] + list(repeats)
    return {name: [{"baseline_csv": b["csv"], **loss_ratios(r, b)} for b in bases]
            for name, r in results.items() if name != baseline}


def summarize(runs_dir, names, baseline, out_json, png, timing_dir=None, replicates=(),
              baseline_repeats=(), statistics_at=()):
    runs_dir = pathlib.Path(runs_dir)
    loaded = {}
    for name in names:
        csv_path, json_path = run_csv(runs_dir, name), runs_dir / f"{name}.json"
        if not csv_path.is_file():
            print(f"skipping {name}: no {csv_path}")
            continue
        meta = json.loads(json_path.read_text()) if json_path.is_file() else {}
        loaded[name] = (read_csv(csv_path), meta, csv_path)
    if baseline not in loaded:
        raise SystemExit(f"the baseline run {baseline!r} is missing in {runs_dir}")
    (base_steps, base_loss, _), base_meta, _ = loaded[baseline]
    base_smooth = smooth(base_loss)
    warmup = spike_warmup(base_meta)

    results = {}
    for name, ((steps, loss, held), meta, csv_path) in loaded.items():
        n = min(len(steps), len(base_steps))
        after = slice(min(warmup, max(0, n - 1)), n)
        ratio = spike_ratio(loss, base_loss)
        step_ratio = loss[:n] / base_smooth[:n]
        spike_at = int(steps[after][np.argmax(ratio[after])]) if n else None
        timing, timing_source = meta, "this run"
        timing_json = pathlib.Path(timing_dir) / f"{name}.json" if timing_dir else None
        if timing_json is not None and timing_json.is_file():
            timing, timing_source = json.loads(timing_json.read_text()), rel(timing_json)
        results[name] = {
            "final_train_loss": final_loss(loss),
            "final_heldout_loss": held[-1][1] if held else None,
            "heldout": [{"step": s, "loss": v} for s, v in held],
            "max_spike": float(np.max(ratio[after])) if n else None,
            "max_spike_step": spike_at,
            "max_step_ratio": float(np.max(step_ratio[after])) if n else None,
            "steps": int(len(steps)),
            "step_ms": timing.get("step_ms"),
            "attention_ms": timing.get("attention_ms"),
            "attention_bench_ms": timing.get("attention_bench_ms"),
            "timing_source": timing_source,
            "attention_path": meta.get("attention_path"),
            "stopped_early": meta.get("stopped_early"),
            "csv": rel(csv_path),
            "png": rel(png),
        }
    add_baseline_ratios(results, baseline)
    repeats, repeat_curves = [], []
    for path in baseline_repeats:
        summary, curve = baseline_repeat(path, baseline, base_loss, results[baseline], warmup)
        repeats.append(summary)
        repeat_curves.append((f"{baseline} repeat {len(repeats)}", curve))

    replicate_curves = []  # (backend, label, line style, curve) of every replicate run
    for index, (label, path) in enumerate(replicates):
        for name in names:
            csv_path = run_csv(path, name)
            if csv_path.is_file() and name in loaded:
                replicate_curves.append((name, f"{name} {label}", REPLICATE_STYLES[
                    index % len(REPLICATE_STYLES)], read_csv(csv_path)))
    shown = {pathlib.Path(path).resolve() for _, path in replicates}
    repeat_curves = [c for c, path in zip(repeat_curves, baseline_repeats)
                     if pathlib.Path(path).resolve() not in shown]  # drawn as replicates
    plot(loaded, baseline, base_smooth, png, repeat_curves, replicate_curves)
    report = {
        # The GPU machine's copy of the tree may have no git history: then this checkout's.
        "commit": (base_meta.get("commit") if base_meta.get("commit") not in (None, "unknown")
                   else git_commit()),
        "dataset": base_meta.get("dataset"),
        "params": base_meta.get("params"),
        "model": base_meta.get("model"),
        "tokens_per_step": base_meta.get("tokens_per_step"),
        "steps": int(len(base_steps)),
        "device": base_meta.get("device"),
        "torch": base_meta.get("torch"),
        "baseline": baseline,
        "spike_definition": f"max over steps >= {warmup} of the run's loss / the baseline's "
                            f"loss, both smoothed ({SMOOTH_WINDOW}-step centred moving average; "
                            f"same batches in the same order); max_step_ratio: the run's "
                            f"unsmoothed loss / the baseline's smoothed loss",
        "runs": results,
    }
    if repeats:
        report["baseline_repeats"] = repeats
        report["vs_baseline_runs"] = ratios_to_baseline_runs(results, baseline, repeats)
    if replicates:
        report["replicates"] = {label: run_ratios(path, names, baseline, base_loss, warmup)
                                for label, path in replicates}
        means = {}
        for name in names:
            if name == baseline or name not in results:
                continue
            sets = [results] + [r for r in report["replicates"].values()]
            for key in ("train_vs_baseline", "heldout_vs_baseline"):
                values = [s[name][key] for s in sets if name in s and key in s[name]]
                means.setdefault(name, {})[key] = {"mean": float(np.mean(values)),
                                                   "min": float(np.min(values)),
                                                   "max": float(np.max(values)),
                                                   "n": len(values)}
        report["ratio_over_replicates"] = means
        report["backend_statistics"] = backend_statistics(
            [results] + list(report["replicates"].values()), list(results), baseline)
        window = max(1, int(round(len(base_steps) * FINAL_FRACTION)))
        run_dirs = [runs_dir] + [path for _, path in replicates]
        report["backend_statistics_at_step"] = {
            str(step): statistics_at_step(step, window, run_dirs, list(results), baseline)
            for step in statistics_at}
    out_json = pathlib.Path(out_json)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(report, indent=2) + "\n")
    for name, r in results.items():
        held = "-" if r["final_heldout_loss"] is None else f"{r['final_heldout_loss']:.4f}"
        print(f"{name:16s} train {r['final_train_loss']:.4f} heldout {held} "
              f"max_spike {r['max_spike']:.3f} (per step {r['max_step_ratio']:.3f}) "
              f"step {r['step_ms']} ms "
              f"attention {r['attention_ms']} ms")
    for r in repeats:
        held = "-" if r["final_heldout_loss"] is None else f"{r['final_heldout_loss']:.4f}"
        print(f"{baseline + ' repeat':16s} train {r['final_train_loss']:.4f} heldout {held} "
              f"({r['train_vs_baseline']:.3f} of {baseline}; smoothed ratio "
              f"{r['min_spike']:.3f}..{r['max_spike']:.3f})")
    print(f"wrote {out_json} and {png}")
    return report


def plot(loaded, baseline, base_smooth, png, repeat_curves=(), replicate_curves=()):
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_ratio) = plt.subplots(2, 1, figsize=(9, 8), sharex=True,
                                            gridspec_kw={"height_ratios": [3, 1.4]})
    ratio_lows, ratio_highs = [0.97], [1.05]  # the ratio axis: at least 0.97..1.05

    def plot_ratio(steps, loss, label, color, style="-"):
        n = min(len(steps), len(base_smooth))
        ratio = smooth(loss[:n]) / base_smooth[:n]
        ax_ratio.plot(steps[:n], ratio, style, label=label, color=color, linewidth=1.0)
        ratio_lows.append(float(np.min(ratio)) - 0.005)
        ratio_highs.append(float(np.max(ratio)) + 0.005)

    colors = {}
    for name, ((steps, loss, held), meta, _) in loaded.items():
        line, = ax_loss.plot(steps, smooth(loss, 21), label=f"{name} (train, smoothed)",
                             linewidth=1.2)
        colors[name] = line.get_color()
        ax_loss.plot(steps, loss, color=line.get_color(), alpha=0.15, linewidth=0.6)
        if held:
            hs, hv = zip(*held)
            ax_loss.plot(hs, hv, "o--", color=line.get_color(), markersize=3,
                         linewidth=0.8, label=f"{name} (held-out)")
        plot_ratio(steps, loss, name, line.get_color())
    for name, label, style, (steps, loss, _) in replicate_curves:
        ax_loss.plot(steps, smooth(loss, 21), style, color=colors[name], linewidth=0.8,
                     label=f"{label} (train, smoothed)")
        plot_ratio(steps, loss, label, colors[name], style)
    for label, (steps, loss, held) in repeat_curves:
        line, = ax_loss.plot(steps, smooth(loss, 21), "--", label=f"{label} (train, smoothed)",
                             linewidth=1.0)
        if held:
            hs, hv = zip(*held)
            ax_loss.plot(hs, hv, "x:", color=line.get_color(), markersize=4, linewidth=0.8,
                         label=f"{label} (held-out)")
        plot_ratio(steps, loss, label, line.get_color(), "--")
    ax_loss.set_ylabel("cross-entropy (nats / byte)")
    # Leave out the first steps' steep descent so that the curves' differences stay visible.
    (steps, loss, _), _, _ = loaded[baseline]
    skip = min(len(loss) - 1, max(1, len(loss) // 50))
    top, bottom = float(np.max(base_smooth[skip:])), float(np.min(base_smooth))
    for _, loss, _ in [c for _, c in repeat_curves] + [c for *_, c in replicate_curves]:
        bottom = min(bottom, float(np.min(smooth(loss))))
    ax_loss.set_ylim(bottom - 0.05 * (top - bottom), top + 0.05 * (top - bottom) + 1e-6)
    ax_loss.legend(fontsize=8)
    ax_loss.grid(alpha=0.3, which="both")
    ax_ratio.axhline(1.0, color="black", linewidth=0.6)
    ax_ratio.set_ylabel(f"loss / {baseline}")
    ax_ratio.set_xlabel("step")
    ax_ratio.grid(alpha=0.3)
    ax_ratio.set_ylim(min(ratio_lows), max(ratio_highs))
    fig.suptitle("Pretraining loss: flamia FP8 attention vs BF16 attention")
    fig.tight_layout()
    png = pathlib.Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs-dir", default=str(HERE / "runs"))
    parser.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS))
    parser.add_argument("--baseline", default="bf16")
    results = REPO / "bench" / "results"
    parser.add_argument("--out-json", default=str(results / "pretrain_x1.json"))
    parser.add_argument("--png", default=str(results / "pretrain_x1.png"))
    parser.add_argument("--timing-dir", help="take step_ms/attention_ms from the runs here")
    parser.add_argument("--replicate", action="append", default=[], metavar="NAME=DIR",
                        help="the same runs from another seed or a repeat")
    parser.add_argument("--baseline-repeat", action="append", default=[], metavar="DIR",
                        help="DIR/<baseline>.csv: the baseline trained again, same seed and data")
    parser.add_argument("--statistics-at", action="append", default=[], type=int, metavar="STEP",
                        help="with replicates: backend_statistics also as if the runs had ended "
                             "at STEP (backend_statistics_at_step)")
    args = parser.parse_args(argv)
    replicates = [tuple(r.split("=", 1)) for r in args.replicate]
    summarize(args.runs_dir, args.runs, args.baseline, args.out_json, args.png, args.timing_dir,
              replicates, args.baseline_repeat, args.statistics_at)


if __name__ == "__main__":
    main()
