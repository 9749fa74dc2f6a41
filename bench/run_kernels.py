#!/usr/bin/env python3
"""Kernel-only timings on every public workload (bench/workloads.json): the forward kernel and
the backward kernel (fp8, fp8-bf16grad, deterministic) on operands already quantized, so that
quantization and host overhead are left out. Writes one JSON.

    python3 bench/run_kernels.py --json OUT/kernels.json [--build build] [--workloads a,b]
        [--workloads-file bench/workloads_extra.json] [--forward-only]
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKWARD_VARIANTS = {"fp8": [], "fp8-bf16grad": ["--bf16grad"],
                     "deterministic": ["--deterministic"]}


def run(binary: Path, workload: dict, extra: list[str]) -> dict:
    args = [str(binary), "--docs", ",".join(map(str, workload["doc_lens"])), "--heads-q",
            str(workload["heads_q"]), "--heads-kv", str(workload["heads_kv"]), "--head-dim",
            str(workload["head_dim"]), *extra]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": (proc.stderr or proc.stdout)[-300:], "returncode": proc.returncode}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--workloads", default="")
    ap.add_argument("--workloads-file", default=str(ROOT / "bench/workloads.json"))
    ap.add_argument("--forward-only", action="store_true", help="skip the backward kernel")
    opts = ap.parse_args()
    build = Path(opts.build)
    workloads = json.loads(Path(opts.workloads_file).read_text())["workloads"]
    chosen = [n for n in workloads if not opts.workloads or n in opts.workloads.split(",")]
    results = {"command": "python3 bench/run_kernels.py", "workloads": {}}
    for name in chosen:
        w = workloads[name]
        rec = {"forward": run(build / "bench_forward_kernel", w, [])}
        variants = {} if opts.forward_only else BACKWARD_VARIANTS
        rec["backward"] = {v: run(build / "bench_backward_kernel", w, extra)
                           for v, extra in variants.items()}
        results["workloads"][name] = rec
        fwd, bwd = rec["forward"], rec["backward"]
        print(f"{name:18s} fwd {fwd.get('ms', float('nan')):.3f} ms "
              f"({fwd.get('tflops', float('nan')):.0f} TF/s); bwd " +
              ", ".join(f"{v} {r.get('ms', float('nan')):.3f} ms" for v, r in bwd.items()),
              flush=True)
    Path(opts.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
