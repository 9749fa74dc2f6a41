#!/usr/bin/env bash
# Session 45: timing probes of the static backward at head dim 128 (not the contract's outputs):
# main, skip (the hand-off stores x without 2^ekc), fold (the folded score gradient, 4 bytes of
# spills), skipfold (both). Forward+backward with quantization, static scales, the public
# workloads, three alternating rounds. Carry .prebuilt-patches.tar.xz.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/pab && tar xJf .prebuilt-patches.tar.xz -C /tmp/pab
d=/tmp/pab
PYTHONPATH=python timeout 560 python3 bench/ab_libraries.py $d/main.so $d/skip.so $d/fold.so \
  $d/skipfold.so --json "$OUT/ab.json" --scale-modes static --rounds 3 \
  --workloads equal-2k,equal-8k,uniform,longtail,longtail-d64-gqa 2>&1 | tail -30
