#!/usr/bin/env bash
# Runs the pretraining comparison on the GPU machine (one H200): builds flamia if a flamia
# backend is asked for, trains each backend, and summarises once all three runs exist.
#
#   examples/pretrain/run_h200.sh                      # bf16 flamia_exact flamia_block32
#   examples/pretrain/run_h200.sh bf16                 # one backend per call also works
#
# Runs go to examples/pretrain/runs/ (ignored by git, kept between calls on a warm machine);
# each run's CSV and JSON, and the summary, are copied to $OUT when it is set. Each run stops
# early, with its summary written, after MAX_MINUTES (default 8) of training.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
runs="examples/pretrain/runs"
mkdir -p "$runs"
backends=("$@")
if [[ ${#backends[@]} -eq 0 ]]; then backends=(bf16 flamia_exact flamia_block32); fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"

for b in "${backends[@]}"; do
  if [[ "$b" == flamia_* && ! -f python/flamia/_lib/libflamia.so ]]; then
    scripts/install-python --no-pip
  fi
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader || true

for b in "${backends[@]}"; do
  python3 examples/pretrain/train.py --attention "$b" --out-dir "$runs" \
    --max-minutes "${MAX_MINUTES:-8}" 2>&1 | tee "$runs/$b.log"
  if [[ -n "${OUT:-}" ]]; then cp "$runs/$b.csv" "$runs/$b.json" "$OUT/"; fi
done

if [[ -f "$runs/bf16.csv" && -f "$runs/flamia_exact.csv" && -f "$runs/flamia_block32.csv" ]]; then
  python3 examples/pretrain/summarize.py --runs-dir "$runs"
  if [[ -n "${OUT:-}" ]]; then cp bench/results/pretrain.json bench/results/pretrain.png "$OUT/"; fi
fi
