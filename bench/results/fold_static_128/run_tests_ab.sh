#!/usr/bin/env bash
# Session 45: the folded score gradient in the static head-dim-128 backward (fold_static_128.patch):
# its GPU tests (every C++ binary and pytest's GPU run, scripts/patch-ab's run.sh), then an A/B
# against main, forward+backward with quantization, both scale modes, the public workloads, three
# alternating rounds. Carry .prebuilt-patches.tar.xz and .prebuilt-patches-tests-fold128.tar.xz.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/pab && for a in .prebuilt-patches*.tar.xz; do tar xJf "$a" -C /tmp/pab; done
OUT=$OUT bash /tmp/pab/run.sh tests fold128
d=/tmp/pab
PYTHONPATH=python timeout 240 python3 bench/ab_libraries.py $d/main.so $d/fold128.so \
  --json "$OUT/ab.json" --scale-modes static,exact --rounds 3 \
  --workloads equal-2k,equal-8k,uniform,longtail,longtail-d64-gqa 2>&1 | tail -20
