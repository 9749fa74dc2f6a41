#!/usr/bin/env python3
"""Turns the GPU check's logs into results.

    collect_results.py tests OUT        OUT/ctest.log + OUT/pytest.log -> OUT/tests.json
    collect_results.py merge OUT --commit SHA --command "..." [--results bench/results]
        OUT/{tests,quantize,attention,kernels}.json + OUT/sass.txt -> RESULTS/h200.json and
        h200.md
    collect_results.py keep KEY RUN.json --what "..." --command "..." [--results bench/results]
        a bench_baselines.py run -> RESULTS/KEY.json (as is) and h200.json's KEY (flamia's and
        the baselines' ms, the fastest BF16 and the ratios), h200.md rendered again
    collect_results.py keep-power-state CONDITIONS.json SUSTAINED.json --what "..." --command "..."
        tools/probes/power_state.py's two runs -> h200.json's power_state, h200.md again
    collect_results.py keep-energy ENERGY.json --what "..." --command "..."
        tools/probes/power_state.py's energy run -> h200.json's power_state.energy, h200.md again
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def count_tests(out: Path) -> dict:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    ctest = out / "ctest.log"
    if ctest.exists():
        text = ctest.read_text(errors="replace")
        # "100% tests passed out of N" or "97% tests passed, 3 tests failed out of N"
        m = re.search(r"tests passed(?:, (\d+) tests failed)? out of (\d+)", text)
        if m:
            failed, total = int(m.group(1) or 0), int(m.group(2))
            skipped = len(re.findall(r"\*\*\*Skipped", text))
            counts["failed"] += failed
            counts["skipped"] += skipped
            counts["passed"] += total - failed - skipped
    pytest = out / "pytest.log"
    if pytest.exists():
        tail = pytest.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        for number, word in re.findall(r"(\d+) (passed|failed|skipped|error)", tail[0]):
            key = "failed" if word == "error" else word
            counts[key] += int(number)
    return counts


def backward_options_table(work: dict) -> list[str]:
    """fwd+bwd ms of the backward's options, and fp8-bf16grad's accuracy, per workload."""
    rows = []
    for name, r in work.items():
        opt = r.get("flamia_options_fwdbwd_ms")
        if not opt:
            continue
        acc = r.get("bf16grad_accuracy", {})

        def err(key, src):
            v = src.get(key)
            return f"{v:.2g}" if isinstance(v, (int, float)) else "-"
        rotated_fwd = r.get("flamia_options_fwd_ms", {}).get("qk_rotation=hadamard")
        rotated_fb = opt.get("qk_rotation=hadamard")
        rotated = (f"{rotated_fwd:.3f} / {rotated_fb:.3f}" if rotated_fwd and rotated_fb
                   else "-")
        rows.append(f"| {name} | {r['flamia_fwdbwd_ms']:.3f} | {opt['fp8-bf16grad']:.3f} | "
                    f"{opt['deterministic']:.3f} | {rotated} | {err('dq_rel_l2_vs_f64', r)}/"
                    f"{err('dk_rel_l2_vs_f64', r)}/{err('dv_rel_l2_vs_f64', r)} | "
                    f"{err('dq_rel_l2_vs_f64', acc)}/{err('dk_rel_l2_vs_f64', acc)}/"
                    f"{err('dv_rel_l2_vs_f64', acc)} |")
    if not rows:
        return []
    return ["", "Backward options (fwd+bwd ms through the PyTorch front, with quantization; "
                "gradient errors against float64):", "",
            "| workload | fp8 | fp8-bf16grad | deterministic | qk_rotation=hadamard fwd / "
            "fwd+bwd | fp8 dQ/dK/dV err | bf16grad dQ/dK/dV err |",
            "|---|---|---|---|---|---|---|", *rows]


def failed_baselines(errors: dict | None) -> str:
    """The backends that raised (not timed, so the fastest BF16 was taken without them), as a
    sentence to append; "" when none did."""
    if not errors:
        return ""
    return "; failed, not timed: " + "; ".join(
        f"{b} ({' '.join(str(e).split())[:120]})" for b, e in errors.items())


def best_cells(r: dict, phase: str) -> str:
    """'best BF16 ms name | x' of a workload, or '- | -' where no BF16 baseline was timed."""
    best = r.get(f"best_bf16_{phase}_ms")
    if best is None:
        return "- | -"
    return f"{best:.3f} {r[f'best_bf16_{phase}_name']} | {r[f'speedup_{phase}']:.2f}"


def workload_table(work: dict, settings: dict | None = None) -> list[str]:
    """End-to-end times, speedups, errors and the baselines of bench_attention.py's workloads
    (settings: the run's scale_mode, rounds, warmup_seconds, anchors_counted, where recorded)."""
    settings = settings or {}
    anchors = (" or FlashAttention-3 / cuDNN anchor of bench/anchors.json"
               if settings.get("anchors_counted", True) else
               "; bench/anchors.json not counted: not the GPU it was measured on")
    rounds = (f", the best of {settings['rounds']} rounds in alternating order"
              if "rounds" in settings else "")
    warmup = (f", after at least {settings['warmup_seconds']} s of warm-up"
              if "warmup_seconds" in settings else "")
    mode = f" (scale_mode {settings['scale_mode']})" if "scale_mode" in settings else ""
    lines = ["", "Times in ms (TFLOP/s with workloads.json's causal convention); speedup = best "
                 f"BF16 (own run{anchors}) / flamia{mode}. flamia includes quantization. "
                 "Each time is the median of calls queued back to back" + rounds + warmup +
                 ", the same for flamia and the baselines run here (bench_attention.py, median_ms).",
             "", "| workload | flamia fwd | best BF16 fwd | x | flamia fwd+bwd | best BF16 fwd+bwd | x | "
                 "O err vs ref | dQ/dK/dV err vs ref |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in work.items():
        def fmt(key):
            v = r.get(key)
            return f"{v:.2g}" if isinstance(v, (int, float)) else "-"
        lines.append(
            f"| {name} | {r['flamia_fwd_ms']:.3f} ({r['flamia_fwd_tflops']:.0f}) | "
            f"{best_cells(r, 'fwd')} | "
            f"{r['flamia_fwdbwd_ms']:.3f} ({r['flamia_fwdbwd_tflops']:.0f}) | "
            f"{best_cells(r, 'fwdbwd')} | {fmt('o_rel_l2_vs_ref')} | "
            f"{fmt('dq_rel_l2_vs_ref')}/{fmt('dk_rel_l2_vs_ref')}/{fmt('dv_rel_l2_vs_ref')} |")
    static = {name: r for name, r in work.items() if "flamia_static_fwd_ms" in r}
    if static:
        lines += ["", "scale_mode \"static\" (K and V one caller-supplied exponent per KV head; "
                      "here this batch's amax, flamia.static_exponents) in the same process, "
                      "against the same fastest BF16 time:", "",
                      "| workload | static fwd | x | static fwd+bwd | x | O err vs ref | "
                      "dQ/dK/dV err vs ref |", "|---|---|---|---|---|---|---|"]
        for name, r in static.items():
            fwd, fb = r["flamia_static_fwd_ms"], r["flamia_static_fwdbwd_ms"]
            acc = r.get("static_accuracy") or {}

            def err(key):
                v = acc.get(key)
                return f"{v:.2g}" if isinstance(v, (int, float)) else "-"
            def x(phase, ms):
                best = r.get(f"best_bf16_{phase}_ms")
                return f"{best / ms:.2f}" if best is not None else "-"
            lines.append(f"| {name} | {fwd:.3f} ({r['fwd_flops'] / fwd / 1e9:.0f}) | "
                         f"{x('fwd', fwd)} | {fb:.3f} | "
                         f"{x('fwdbwd', fb)} | {err('o_rel_l2_vs_ref')} | "
                         f"{err('dq_rel_l2_vs_ref')}/{err('dk_rel_l2_vs_ref')}/"
                         f"{err('dv_rel_l2_vs_ref')} |")
    lines += ["", "Baselines measured in the same process (*_anchor: bench/anchors.json's TFLOP/s "
                  "at this workload's FLOPs, not measured here):", ""]
    for name, r in work.items():
        parts = [f"{b} {v['fwd_ms']:.3f}/{v['fwdbwd_ms']:.3f}" for b, v in r["baselines"].items()]
        lines.append(f"- {name}: " + "; ".join(parts) + " (fwd/fwd+bwd ms)" +
                     failed_baselines(r.get("baseline_errors")))
    per_call = [f"{name} {r['flamia_fwd_per_call_ms']:.3f}/{r['flamia_fwdbwd_per_call_ms']:.3f}"
                for name, r in work.items() if "flamia_fwd_per_call_ms" in r]
    if per_call:
        lines += ["", "flamia per call on an idle GPU (synchronised after each call, so the host "
                      "time before its first kernel counts): " + "; ".join(per_call) +
                      " (fwd/fwd+bwd ms)."]
    return lines


def training_forward_table(work: dict) -> list[str]:
    """The forward with a gradient wanted (it keeps its quantized Q, K, V) and fwd+bwd with and
    without the kept operands, per workload (bench_attention.py)."""
    rows = [f"| {name} | {r['flamia_fwd_ms']:.3f} | {r['flamia_fwd_train_ms']:.3f} | "
            f"{r['flamia_fwdbwd_ms']:.3f} | {r['flamia_fwdbwd_requantize_ms']:.3f} |"
            for name, r in work.items()
            if "flamia_fwd_train_ms" in r and "flamia_fwdbwd_requantize_ms" in r]
    if not rows:
        return []
    return ["", "The training forward keeps its quantized Q, K, V for the backward "
                "(FLAMIA_KEEP_OPERANDS, default 1), ms; the backward then reads them instead of "
                "quantizing q, k, v again:", "",
            "| workload | forward, no gradient | forward, gradient wanted | fwd+bwd, kept | "
            "fwd+bwd, quantized again (FLAMIA_KEEP_OPERANDS=0) |", "|---|---|---|---|---|"] + rows


# Kernel name fragments -> the column of the training-step profile (in this order; the rest are
# the small kernels: argument checks, schedules, row factors, fills, memsets).
STEP_PARTS = (("forward quantize", "quantize_tensor_kernel<", ", false>"),
              ("forward kernel", "forward_kernel<", ""),
              ("dO job", "quantize_tensor_kernel<", ", true>"),
              ("backward kernel", "backward_kernel<", ""),
              ("dQ to BF16", "convert_dq_kernel", ""))


def step_part(name: str) -> str:
    for label, head, tail in STEP_PARTS:
        if head in name and tail in name:
            return label
    return "small kernels"


def training_step_table(profile: dict) -> list[str]:
    """Where a training step's attention time goes (bench/profile_forward_call.py --backward:
    the kernels of one forward with a gradient wanted and its backward, best of N calls)."""
    rows = []
    labels = [label for label, _, _ in STEP_PARTS] + ["small kernels"]
    for name, r in profile.get("workloads", {}).items():
        call = r["best_call"]
        parts = dict.fromkeys(labels, 0.0)
        for k in call["kernels"]:
            parts[step_part(k["name"])] += k["us"]
        total = call["kernel_us"]
        outside = total - parts["forward kernel"] - parts["backward kernel"]
        rows.append(f"| {name} | " + " | ".join(f"{parts[x]:.0f}" for x in labels) +
                    f" | {total:.0f} | {100 * outside / total:.0f}% |")
    if not rows:
        return []
    return ["", f"One training step's attention on the GPU, us per kernel group "
                f"(`{profile.get('command', 'bench/profile_forward_call.py --backward')}`, "
                f"commit {profile.get('commit', '?')}; best of {profile.get('calls', '?')} calls):", "",
            "| workload | " + " | ".join(labels) + " | total | outside the two attention kernels |",
            "|---|" + "---|" * (len(labels) + 2)] + rows


def baselines_table(block: dict) -> list[str]:
    """A bench_baselines.py run kept in h200.json (`noncausal`, `long_context`): ms per backend."""
    lines = ["", f"{block['what']} Command: `{block['command']}`. ms fwd / fwd+bwd; x = fastest "
                 "BF16 / flamia.", "",
             "| workload | flamia | cudnn | fa2_varlen | flex | fa4 | x fwd | x fwd+bwd |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in block["workloads"].items():
        timed = dict(r.get("baselines", {}), flamia={"fwd_ms": r["flamia_fwd_ms"],
                                                    "fwdbwd_ms": r["flamia_fwdbwd_ms"]})
        cells = [f"{timed[b]['fwd_ms']:.3f} / {timed[b]['fwdbwd_ms']:.3f}" if b in timed else "-"
                 for b in ("flamia", "cudnn", "fa2_varlen", "flex", "fa4")]
        lines.append(f"| {name} | {' | '.join(cells)} | {r['speedup_fwd']:.2f} "
                     f"({r['best_bf16_fwd']}) | {r['speedup_fwdbwd']:.2f} "
                     f"({r['best_bf16_fwdbwd']}) |")
    failed = [f"- {name}{failed_baselines(r['baseline_errors'])}"
              for name, r in block["workloads"].items() if r.get("baseline_errors")]
    if failed:
        lines += ["", "'-': not timed (no path for the shape, not asked for, or failed):", "",
                  *failed]
    return lines


def power_state_tables(block: dict) -> list[str]:
    """h200.json's `power_state` (tools/probes/power_state.py's two runs): flamia against
    FlashAttention-4 in the GPU's sustained, power-capped state, and each time under the
    probe's conditions."""
    lines = ["", f"{block['what']} Command: `{block['command']}`.", "",
             "Sustained state (ms; x = FA4 / flamia):", "",
             "| workload | flamia fwd | FA4 fwd | x | flamia fwd+bwd | FA4 fwd+bwd | x |",
             "|---|---|---|---|---|---|---|"]
    sustained = block["sustained"]["runs"]
    names = dict.fromkeys(key.split("/")[0] for key in sustained)
    for name in names:
        def ms(backend, phase):
            return sustained[f"{name}/{backend}/{phase}/sustained"]["ms"]
        cells = []
        for phase in ("fwd", "fwdbwd"):
            mine, fa4 = ms("flamia", phase), ms("fa4", phase)
            cells += [f"{mine:.3f}", f"{fa4:.3f}", f"{fa4 / mine:.2f}"]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    runs = block["conditions"]["runs"]
    labels = list(dict.fromkeys(key.rsplit("/", 1)[1] for key in runs))  # in the probe's order
    lines += ["", "By condition (ms; SM clock and power right after):", "",
              "| workload / backend / phase | " + " | ".join(labels) + " |",
              "|---|" + "---|" * len(labels)]
    rows = dict.fromkeys(key.rsplit("/", 1)[0] for key in runs)
    for row in rows:
        cells = []
        for label in labels:
            r = runs[f"{row}/{label}"]
            clock_power = ", ".join(r["after"].split(", ")[:2])
            cells.append(f"{r['ms']:.3f} ({clock_power})")
        lines.append(f"| {row} | {' | '.join(cells)} |")
    return lines


def static_scales_table(block: dict) -> list[str]:
    """h200.json's `static_scales`: scale_mode "static" against "exact" and the fastest BF16
    kernel of the same run (FlashAttention-4's time from another run of the session beside)."""
    lines = ["", "## scale_mode \"static\" (K and V one exponent per KV head)", "",
             f"{block['what']} Command: `{block['command']}`.", "",
             "| workload | exact fwd | static fwd | best BF16 fwd (this run) | x | FA4 fwd (other run) "
             "| x | exact fwd+bwd | static fwd+bwd |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in block["workloads"].items():
        best_name, best_ms = r["best_bf16_this_run"]["fwd"]
        fa4 = (r.get("fa4_same_session_other_process") or {}).get("fwd_ms")
        fa4_cells = f"{fa4:.3f} | {fa4 / r['flamia_static_fwd_ms']:.2f}" if fa4 else "- | -"
        lines.append(f"| {name} | {r['flamia_exact_fwd_ms']:.3f} | {r['flamia_static_fwd_ms']:.3f} | "
                     f"{best_ms:.3f} {best_name} | {best_ms / r['flamia_static_fwd_ms']:.2f} | "
                     f"{fa4_cells} | {r['flamia_exact_fwdbwd_ms']:.3f} | "
                     f"{r['flamia_static_fwdbwd_ms']:.3f} |")
    return lines


def energy_table(block: dict) -> list[str]:
    """power_state.energy (tools/probes/power_state.py energy): joules per call against
    FlashAttention-4, both in the sustained state."""
    runs = block["runs"]
    lines = ["", f"{block['what']} Command: `{block['command']}`.", "",
             "| workload | phase | flamia J | FA4 J | flamia / FA4 | flamia ms, W | FA4 ms, W |",
             "|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(key.split("/")[0] for key in runs):
        for phase in ("fwd", "fwdbwd"):
            mine, fa4 = runs[f"{name}/flamia/{phase}"], runs[f"{name}/fa4/{phase}"]
            lines.append(f"| {name} | {phase} | {mine['joules_per_call']:.3f} | "
                         f"{fa4['joules_per_call']:.3f} | "
                         f"{mine['joules_per_call'] / fa4['joules_per_call']:.2f} | "
                         f"{mine['ms']:.3f}, {mine['watts']:.0f} | {fa4['ms']:.3f}, {fa4['watts']:.0f} |")
    return lines


def markdown(results: dict) -> str:
    lines = [f"# flamia on {results.get('device', 'H200')}", "",
             f"Commit `{results.get('commit', '?')}`; command: `{results.get('command', '')}`.", ""]
    t = results.get("tests", {})
    if results.get("commit_note"):
        lines += [f"Notes: {results['commit_note']}.", ""]
    if results.get("carried_over"):
        lines += ["Not measured by this run, kept from an earlier h200.json: " + "; ".join(
            f"{key} (commit {commit})" for key, commit in results["carried_over"].items()) + ".",
            ""]
    lines.append(f"Tests{' at ' + t['commit'] if t.get('commit') else ''}: "
                 f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed, "
                 f"{t.get('skipped', 0)} skipped" +
                 (f" ({results['tests_at_head']})" if results.get("tests_at_head") else "") + ".")
    qz = results.get("quantize")
    if qz:
        lines += ["", f"Quantize pass: {qz.get('bytes', 0) / 1e9:.2f} GB in {qz.get('ms', 0):.3f} ms = "
                      f"{qz.get('tb_s', 0):.2f} TB/s, {100 * qz.get('bandwidth_fraction', 0):.0f}% of the "
                      f"device-to-device copy rate ({qz.get('copy_tb_s', 0):.2f} TB/s) in the same run."]
    work = results.get("workloads", {})
    if work:
        lines += workload_table(work, results.get("attention_settings"))
        lines += training_forward_table(work)
        lines += backward_options_table(work)
    kernels = results.get("kernels", {}).get("workloads", {})
    if kernels:
        lines += ["", "Kernels alone (operands already quantized; `python3 bench/run_kernels.py`), "
                      "ms (TFLOP/s):", "",
                  "| workload | forward | backward fp8 | backward fp8-bf16grad | backward deterministic |",
                  "|---|---|---|---|---|"]
        for name, r in kernels.items():
            def cell(x):
                return f"{x['ms']:.3f} ({x['tflops']:.0f})" if "ms" in x else "error"
            b = r["backward"]
            lines.append(f"| {name} | {cell(r['forward'])} | {cell(b['fp8'])} | "
                         f"{cell(b['fp8-bf16grad'])} | {cell(b['deterministic'])} |")
    fp8 = {name: r["fp8_baselines"] for name, r in work.items() if r.get("fp8_baselines")}
    if fp8 and kernels:
        lines += ["", "FP8 baselines, kernel alone on operands already in E4M3 (per-tensor scales, no "
                      "quantization, FP8 output), against flamia's forward kernel alone:", "",
                  "| workload | baseline | baseline fwd kernel | flamia fwd kernel |", "|---|---|---|---|"]
        for name, baselines in fp8.items():
            mine = kernels.get(name, {}).get("forward", {}).get("ms")
            for label, r in baselines.items():
                lines.append(f"| {name} | {label} | {r['fwd_kernel_ms']:.3f} | "
                             f"{mine:.3f} |" if mine else f"| {name} | {label} | "
                             f"{r['fwd_kernel_ms']:.3f} | - |")
    fp8_failed = [f"- {name}: cuDNN FP8{failed_baselines(r['fp8_baseline_errors'])}"
                  for name, r in work.items() if r.get("fp8_baseline_errors")]
    if fp8_failed:
        lines += ["", "FP8 baselines that raised (not BF16 baselines: no ratio used them):", "",
                  *fp8_failed]
    if results.get("training_step_profile"):
        lines += training_step_table(results["training_step_profile"])
    extra = results.get("attention_extra", {}).get("workloads", {})
    if extra:
        lines += ["", "## Workloads beyond the public ones (bench/workloads_extra.json)"]
        lines += workload_table(extra, results["attention_extra"])
    for key, title in (("noncausal", "Non-causal packed documents"),
                       ("long_context", "Long context (bench/workloads_long.json)"),
                       ("sliding_window", "Causal sliding window of 4096 keys")):
        if results.get(key, {}).get("workloads"):
            lines += ["", f"## {title}"] + baselines_table(results[key])
    if results.get("static_scales"):
        lines += static_scales_table(results["static_scales"])
    if results.get("power_state"):
        lines += ["", "## Power state: sustained load against a few calls after idle"]
        lines += power_state_tables(results["power_state"])
        if results["power_state"].get("energy"):
            lines += energy_table(results["power_state"]["energy"])
    return "\n".join(lines) + "\n"


# What a merge reads from OUT: PARTS (OUT/PART.json as h200.json's PART; attention.json becomes
# ATTENTION_KEYS) and sass.txt. A key among them that this run has no file for is kept from the
# previous h200.json under carried_over, with the commit it was measured at (h200.md names it),
# not passed off as measured at this run's commit.
PARTS = ("attention_extra", "kernels_extra", "tests", "quantize", "attention", "kernels")
ATTENTION_KEYS = ("device", "torch", "workloads", "attention_settings")
MERGED_KEYS = tuple(p for p in PARTS if p != "attention") + ATTENTION_KEYS + ("sass",)


def write_results(dest: Path, results: dict) -> None:
    """RESULTS/h200.json and its rendering h200.md."""
    (dest / "h200.json").write_text(json.dumps(results, indent=1))
    (dest / "h200.md").write_text(markdown(results))


def baselines_block(run: dict, what: str, command: str, file: str) -> dict:
    """h200.json's record of a bench_baselines.py run (what baselines_table renders)."""
    workloads = {}
    for name, r in run["workloads"].items():
        timed = {b: {"fwd_ms": x["fwd_ms"], "fwdbwd_ms": x["fwdbwd_ms"]}
                 for b, x in r.items() if isinstance(x, dict) and "fwd_ms" in x}
        # backends that raised: the fastest BF16 was taken without them (say so)
        errors = {b: x["error"] for b, x in r.items()
                  if isinstance(x, dict) and "error" in x and "fwd_ms" not in x}
        flamia = timed.pop("flamia")
        workloads[name] = {"flamia_fwd_ms": flamia["fwd_ms"],
                           "flamia_fwdbwd_ms": flamia["fwdbwd_ms"],
                           **{k: r[k] for k in ("best_bf16_fwd", "speedup_fwd", "best_bf16_fwdbwd",
                                                "speedup_fwdbwd") if k in r},
                           "baselines": timed, **({"baseline_errors": errors} if errors else {})}
    return {"what": what, "command": command, "file": file, "workloads": workloads}


def keep_baselines_run(key: str, run_file: Path, what: str, command: str, dest: Path) -> None:
    run = json.loads(run_file.read_text())
    kept = dest / f"{key}.json"
    kept.write_text(json.dumps(run, indent=1))
    results = json.loads((dest / "h200.json").read_text())
    results[key] = baselines_block(run, what, command, str(kept))
    write_results(dest, results)
    print(f"kept {run_file} as {kept} and h200.json's {key}")


def keep_power_state(conditions_file: Path, sustained_file: Path, what: str, command: str,
                     dest: Path) -> None:
    """tools/probes/power_state.py's conditions and sustained runs -> h200.json's power_state
    (copied as RESULTS/power_state_{conditions,sustained}.json)."""
    results = json.loads((dest / "h200.json").read_text())
    block = {"what": what, "command": command, "files": []}
    for part, source in (("conditions", conditions_file), ("sustained", sustained_file)):
        block[part] = json.loads(source.read_text())
        kept = dest / f"power_state_{part}.json"
        kept.write_text(json.dumps(block[part], indent=1))
        block["files"].append(str(kept))
    results["power_state"] = block
    write_results(dest, results)
    print(f"kept the power-state runs as {block['files']} and h200.json's power_state")


def keep_energy(energy_file: Path, what: str, command: str, dest: Path) -> None:
    """tools/probes/power_state.py's energy run -> h200.json's power_state.energy (copied as
    RESULTS/power_state_energy.json)."""
    results = json.loads((dest / "h200.json").read_text())
    run = json.loads(energy_file.read_text())
    kept = dest / "power_state_energy.json"
    kept.write_text(json.dumps(run, indent=1))
    results.setdefault("power_state", {})["energy"] = {"what": what, "command": command,
                                                       "file": str(kept), **run}
    write_results(dest, results)
    print(f"kept the energy run as {kept} and h200.json's power_state.energy")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["tests", "merge", "keep", "keep-power-state", "keep-energy"])
    ap.add_argument("out", help="OUT (tests, merge), the KEY to keep a run under (keep), or "
                                "the conditions run (keep-power-state), or the energy run (keep-energy)")
    ap.add_argument("run", nargs="?", help="keep: the bench_baselines.py JSON; "
                                           "keep-power-state: the sustained run")
    ap.add_argument("--commit", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--what", dest="description", default="", help="keep: what the run is")
    ap.add_argument("--results", default="bench/results")
    a = ap.parse_args()
    if a.what == "keep":
        if not a.run:
            ap.error("keep needs KEY and the run's JSON")
        keep_baselines_run(a.out, Path(a.run), a.description, a.command, Path(a.results))
        return
    if a.what == "keep-power-state":
        if not a.run:
            ap.error("keep-power-state needs the conditions run and the sustained run")
        keep_power_state(Path(a.out), Path(a.run), a.description, a.command, Path(a.results))
        return
    if a.what == "keep-energy":
        keep_energy(Path(a.out), a.description, a.command, Path(a.results))
        return
    out = Path(a.out)
    if a.what == "tests":
        counts = count_tests(out)
        (out / "tests.json").write_text(json.dumps(counts))
        print("tests:", counts)
        return
    results = {"commit": a.commit, "command": a.command}
    for part in PARTS:  # (the _extra ones: bench/workloads_extra.json)
        f = out / f"{part}.json"
        if f.exists():
            data = json.loads(f.read_text())
            if part == "attention":
                results["device"] = data.get("device")
                results["torch"] = data.get("torch")
                results["workloads"] = data.get("workloads", {})
                results["attention_settings"] = {
                    k: data[k] for k in ("scale_mode", "rounds", "warmup_seconds",
                                         "anchors_counted") if k in data}
                assert set(ATTENTION_KEYS) <= set(results)
            else:
                results[part] = data
    measured = out / "measured.txt"  # the GPU tests' printed errors, one line per shape
    if measured.exists():
        results["measured_per_shape"] = measured.read_text().strip().splitlines()
    sass = out / "sass.txt"
    if sass.exists():
        results["sass"] = sass.read_text().strip().splitlines()[:40]
    dest = Path(a.results)
    dest.mkdir(parents=True, exist_ok=True)
    previous = dest / "h200.json"  # its other keys (A/B runs, profiles) name their own commits
    if previous.exists():
        old = json.loads(previous.read_text())
        carried = {}
        for key, value in old.items():
            stale = ("commit_note", "measured_per_shape", "carried_over") + (
                ("tests_at_head",) if "tests" in results else ())  # a new run's tests replace it
            if key not in results and key not in stale:
                results[key] = value
                if key in MERGED_KEYS:
                    carried[key] = old.get("carried_over", {}).get(key, old.get("commit", "?"))
        if carried:
            results["carried_over"] = carried
    write_results(dest, results)
    print(f"wrote {dest / 'h200.json'} and {dest / 'h200.md'}")


if __name__ == "__main__":
    main()
