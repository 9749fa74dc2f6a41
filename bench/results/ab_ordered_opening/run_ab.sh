#!/usr/bin/env bash
# Session 45: main against the two ordered-opening variants (scripts/patch-ab's libraries),
# forward+backward with quantization, both scale modes, the public workloads, alternating.
# Carry .prebuilt-patches.tar.xz.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/pab && tar xJf .prebuilt-patches.tar.xz -C /tmp/pab
d=/tmp/pab
PYTHONPATH=python timeout 560 python3 bench/ab_libraries.py $d/main.so $d/ord128.so $d/ordall.so \
  --json "$OUT/ab.json" --scale-modes static,exact --rounds 2 \
  --workloads equal-2k,equal-8k,uniform,longtail,longtail-d64-gqa 2>&1 | tail -40
