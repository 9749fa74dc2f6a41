#!/usr/bin/env python3
"""A/B of two (or more) builds of libflamia end to end: flamia's forward and forward+backward
(quantization included) on the public workloads, each library in its own subprocess (a library
loads once per process), alternating libraries round by round; the best of the rounds per
library, and each library's ratio to the first. The JSON is rewritten after every run, so a
timeout keeps the runs done so far.

    PYTHONPATH=python python3 bench/ab_libraries.py LIB_A LIB_B [...] --json OUT.json \
        [--scale-modes exact,static] [--workloads a,b] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(workloads: list[str], modes: list[str], out: str) -> None:
    import flamia
    from bench_attention import all_workloads, bench_flamia, make_inputs

    every = all_workloads()
    results = {}
    for name in workloads:
        q, k, v, d_o, cu, max_len = make_inputs(every[name])
        static = flamia.static_exponents(k, v)
        for mode in modes:
            options = {"static_exponents": static} if mode == "static" else {}
            fwd, fwdbwd = bench_flamia(q, k, v, d_o, cu, max_len, mode, **options)
            results[f"{name}/{mode}"] = {"fwd_ms": fwd, "fwdbwd_ms": fwdbwd}
    Path(out).write_text(json.dumps(results))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("libraries", nargs="+")
    ap.add_argument("--json", required=True)
    ap.add_argument("--scale-modes", default="exact,static")
    ap.add_argument("--workloads", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    modes = opts.scale_modes.split(",")
    public = json.loads((Path(__file__).resolve().parent / "workloads.json").read_text())
    names = opts.workloads.split(",") if opts.workloads else list(public["workloads"])
    if opts.child:
        child(names, modes, opts.child)
        return
    runs: dict[str, list[dict]] = {lib: [] for lib in opts.libraries}
    started = time.monotonic()
    for round_index in range(opts.rounds):
        for lib in opts.libraries:
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                env = dict(os.environ, FLAMIA_LIBRARY=lib)
                cmd = [sys.executable, __file__, "--child", tmp.name, "--json", tmp.name, "--scale-modes",
                       opts.scale_modes, "--workloads", ",".join(names), lib]
                subprocess.run(cmd, env=env, check=True)
                runs[lib].append(json.loads(Path(tmp.name).read_text()))
            print(f"round {round_index + 1}/{opts.rounds} {Path(lib).stem}: "
                  f"{time.monotonic() - started:.0f} s", flush=True)
            # after every run, so that a timeout leaves the rounds done so far
            report = summarize(opts.libraries, runs)
            Path(opts.json).write_text(json.dumps(report, indent=1))
    print_report(report)


def summarize(libraries: list[str], runs: dict[str, list[dict]]) -> dict:
    """The best of each library's runs so far and its ratio to the first library (the libraries
    not run yet are left out)."""
    done = [lib for lib in libraries if runs[lib]]
    best = {lib: {key: {m: min(r[key][m] for r in runs[lib]) for m in ("fwd_ms", "fwdbwd_ms")}
                  for key in runs[lib][0]} for lib in done}
    first = libraries[0]
    return {"libraries": done, "rounds": min(len(runs[lib]) for lib in done), "best": best,
            "runs": {lib: runs[lib] for lib in done},
            "ratio_to_first": {lib: {key: {m: round(v[m] / best[first][key][m], 4) for m in v}
                                     for key, v in b.items()} for lib, b in best.items()}}


def print_report(report: dict) -> None:
    libraries, best = report["libraries"], report["best"]
    first = libraries[0]
    for key in best[first]:
        print(key, " ".join(f"{best[lib][key]['fwd_ms']:.3f}/{best[lib][key]['fwdbwd_ms']:.3f}"
                            for lib in libraries))
    # forward+backward time ratios to the first library, one column per library
    print("fwd+bwd / first:", " ".join(Path(lib).stem for lib in libraries[1:]))
    for key in best[first]:
        print(f"  {key:32s}", " ".join(f"{report['ratio_to_first'][lib][key]['fwdbwd_ms']:.3f}"
                                       for lib in libraries[1:]))


if __name__ == "__main__":
    main()
