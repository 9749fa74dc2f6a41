#!/usr/bin/env bash
# Several runs per backend of one recipe, side by side on the GPUs of one machine: the main run and
# REPEAT=1 .. REPEATS-1 (the same seed, data and code; the runs differ only by the order of the
# kernels' atomic additions), each a run_h200.sh of its own, then one summary of them all with
# each backend's mean and spread (summarize.py backend_statistics):
#
#   QK_NORM=1 SEQS_PER_STEP=2 MAX_MINUTES=8.5 examples/pretrain/run_repeats_h200.sh
#   RESUME=1 QK_NORM=1 SEQS_PER_STEP=2 MAX_MINUTES=8.5 examples/pretrain/run_repeats_h200.sh
#       # again while the machine is warm, until every run has finished
#
# Builds the library once, here, unless CARRIED_LIB=1 (then python/flamia/_lib/libflamia.so
# must be there). Writes <RESULTS_DIR>/pretrain<recipe>.{json,png} and the runs' CSV and JSON
# under <RESULTS_DIR>/pretrain<recipe>/ (the main runs) and .../repeat<k>/, and tars them to
# $OUT when it is set. Environment: REPEATS (default 3), GPUS (how many GPUs to spread the
# repeats over; default all) and everything run_h200.sh reads
# (BACKENDS, SEED, SEQS_PER_STEP, QK_NORM, MAX_MINUTES, TRAIN_ARGS, TAG, RUNS_ROOT, RESULTS_DIR).
# With TAG the runs and the gathered CSVs get the _TAG suffix; without bf16 among BACKENDS the
# CSVs are gathered but not summarised (summarize.py needs the BF16 runs beside them).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
repeats=${REPEATS:-3}
recipe=$(RECIPE_SUFFIX_ONLY=1 examples/pretrain/run_h200.sh)
runs_root=${RUNS_ROOT:-examples/pretrain}
results=${RESULTS_DIR:-bench/results}
read -r -a backends <<< "${BACKENDS:-bf16 flamia_exact flamia_block32}"
if [[ ${CARRIED_LIB:-0} != 1 ]]; then
  scripts/install-python --no-pip  # once: the runs below would otherwise build side by side
fi
export CARRIED_LIB=1 TIMING=0  # step times of runs sharing the GPU mean nothing

tag=${TAG:+_$TAG}  # run_h200.sh's TAG: other backends or arguments beside a recipe's runs
run_dir() {  # repeat index -> that run's directory (0: the main run), as run_h200.sh names it
  echo "$runs_root/runs$recipe$([[ $1 == 0 ]] || echo "_repeat$1")$tag"
}
# Repeat k trains on GPU k mod GPUS (default: every GPU nvidia-smi lists; 1 without one).
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
((gpus >= 1)) || gpus=1
for ((k = 0; k < repeats; ++k)); do
  # each run's own summary stays in its (git-ignored) runs directory; nothing of it goes to $OUT
  if ((k == 0)); then
    env -u REPEAT CUDA_VISIBLE_DEVICES=0 OUT= RESULTS_DIR="$(run_dir 0)" \
      examples/pretrain/run_h200.sh &
  else
    REPEAT=$k CUDA_VISIBLE_DEVICES=$((k % gpus)) OUT= RESULTS_DIR="$(run_dir "$k")" \
      examples/pretrain/run_h200.sh &
  fi
done
failed=0
for job in $(jobs -p); do wait "$job" || failed=1; done
((failed == 0)) || { echo "run_repeats: a run_h200.sh failed (logs in its runs directory)" >&2; exit 1; }
for ((k = 0; k < repeats; ++k)); do
  if compgen -G "$(run_dir "$k")/*.resume.pt" >/dev/null; then
    echo "run_repeats: stopped at MAX_MINUTES; continue with RESUME=1 while the machine is warm"
    exit 0
  fi
done

# Every run has finished: gather the CSVs and JSONs beside the summary, and summarise.
name="pretrain${recipe:-_x1}$tag"  # pretrain.json is the hand-built headline
collected="$results/$name"
replicate_args=()
for ((k = 0; k < repeats; ++k)); do
  dest="$collected$([[ $k == 0 ]] || echo "/repeat$k")"
  mkdir -p "$dest"
  for b in "${backends[@]}"; do cp "$(run_dir "$k")/$b".{csv,json} "$dest/"; done
  ((k == 0)) || replicate_args+=(--replicate "repeat$k=$dest" --baseline-repeat "$dest")
done
summaries=()
if [[ " ${backends[*]} " == *" bf16 "* ]]; then
  python3 examples/pretrain/summarize.py --runs-dir "$collected" --runs "${backends[@]}" \
    "${replicate_args[@]}" --out-json "$collected.json" --png "$collected.png"
  summaries=("$collected.json" "$collected.png")
else
  echo "run_repeats: no bf16 among BACKENDS; summarise with summarize.py next to BF16 runs' CSVs"
fi
if [[ -n "${OUT:-}" ]]; then
  tar czf "$OUT/$name.tgz" "$collected" "${summaries[@]}"
fi
