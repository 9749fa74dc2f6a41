#!/usr/bin/env bash
# Kernel-only forward timings on every public workload (bench/workloads.json).
cd "$(dirname "$0")/.."
python3 - <<'PY'
import json, subprocess
w = json.load(open("bench/workloads.json"))["workloads"]
for name, c in w.items():
    args = ["build/bench_forward_kernel", "--docs", ",".join(map(str, c["doc_lens"])),
            "--heads-q", str(c["heads_q"]), "--heads-kv", str(c["heads_kv"]),
            "--head-dim", str(c["head_dim"])]
    out = subprocess.run(args, capture_output=True, text=True)
    print(f"{name:18s} {out.stdout.strip()} {out.stderr.strip()[:200]}")
PY
