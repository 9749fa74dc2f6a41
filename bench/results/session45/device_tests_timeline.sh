#!/usr/bin/env bash
# Session 45, device call 1: main's GPU tests at HEAD (scripts/patch-ab's run.sh), then the
# backward's timeline counters (FLAMIA_TIMELINE build of bench_backward_kernel) beside the
# production binary's time on three shapes. Carry: .prebuilt-patches.tar.xz,
# .prebuilt-patches-tests-main.tar.xz, .carry/profile-bins.tar.xz, .carry/tl-bins.tar.xz.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/pab && for a in .prebuilt-patches*.tar.xz; do tar xJf "$a" -C /tmp/pab; done
OUT=$OUT bash /tmp/pab/run.sh tests main
mkdir -p /tmp/m && tar xJf .carry/profile-bins.tar.xz -C /tmp/m && tar xJf .carry/tl-bins.tar.xz -C /tmp/m
run_shape() {  # name, bench_backward_kernel arguments...
  local name=$1
  shift
  local ms
  ms=$(/tmp/m/build/bench_backward_kernel "$@" --iters 20 | tee "$OUT/bwd_$name.txt" |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.readlines()[-1])["ms"])')
  echo "$name production kernel: $ms ms"
  FLAMIA_TIMELINE_OUT=/tmp/tl_$name.bin /tmp/m/build-tl/bench_backward_kernel "$@" --iters 5 \
    >"$OUT/tl_$name.txt" 2>&1
  python3 bench/timeline_report.py backward /tmp/tl_$name.bin --kernel-ms "$ms" \
    --json "$OUT/tl_$name.json" | tee "$OUT/tl_${name}_report.txt"
}
run_shape equal8k --docs 8192,8192,8192,8192 --heads-q 16 --heads-kv 16 --head-dim 128
run_shape equal2k --docs 2048,2048,2048,2048,2048,2048,2048,2048,2048,2048,2048,2048,2048,2048,2048,2048 --heads-q 16 --heads-kv 16 --head-dim 128
run_shape lt_d64 --docs 8192,4096,2048,1024,512,256,128,64,16384 --heads-q 32 --heads-kv 8 --head-dim 64
