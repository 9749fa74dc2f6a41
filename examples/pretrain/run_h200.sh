#!/usr/bin/env bash
# Runs the pretraining comparison on the GPU machine (one H200): builds flamia, trains the three
# backends (BF16 FA2 varlen, flamia exact, flamia block32) side by side on the GPU for their
# losses, then each backend alone for a short while for its step timings, and summarises.
#
#   examples/pretrain/run_h200.sh              # seed 1 -> examples/pretrain/runs/
#   SEED=2 examples/pretrain/run_h200.sh       # another seed -> examples/pretrain/runs_seed2/
#   SEQS_PER_STEP=4 examples/pretrain/run_h200.sh   # 4 x 8k tokens per step -> runs_x4/
#   RESUME=1 ...                               # continue runs that stopped at MAX_MINUTES
#   QK_NORM=1 ...                              # the model with QK-norm -> runs..._qknorm/
#   REPEAT=1 BACKENDS=bf16 ...                 # the same seed again -> runs..._repeat1/ (the
#       spread of identical runs; summarize.py --baseline-repeat reads it next to the main run)
#   BACKENDS="fp8fwd_bf16bwd bf16fwd_fp8bwd" TIMING=0 ...  # other backends (attention.py);
#       without bf16 among them, summarise against a BF16 run's CSV; TIMING=0: no solo timing
#       runs (step times are then those of the runs sharing the GPU)
#   CARRIED_LIB=1 ...                          # use a python/flamia/_lib/libflamia.so built
#       elsewhere and carried (no build on the device; scripts/install-python --no-pip here)
#   run_repeats_h200.sh                        # several runs per backend side by side
# Also: TAG (runs..._TAG/: other backends of the same recipe beside its runs, e.g. TAG=leak),
# TRAIN_ARGS (more train.py arguments, e.g. a CPU smoke test's "--preset cpu-tiny
# --device cpu --steps 4"), RUNS_ROOT / RESULTS_DIR (where runs*/ and the summaries go; default
# examples/pretrain and bench/results), RECIPE_SUFFIX_ONLY=1 (print the recipe's name suffix,
# e.g. _x2_qknorm, and exit).
#
# Training numerics do not depend on the GPU being shared; timings do, hence the solo runs.
# Each loss run stops early, with its summary written, after MAX_MINUTES (default 8), leaving a
# resume state (model, optimizer, data position; train.py --resume) in the runs directory, which
# is git-ignored and so stays on a warm device machine: the next call with RESUME=1 continues
# bit for bit. Timing runs and the summary follow once every loss run has finished.
# Results (CSV, JSON, summary, PNG) are copied to $OUT when it is set.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
seed=${SEED:-1}
seqs=${SEQS_PER_STEP:-1}
qk_norm=${QK_NORM:-0}
suffix="$([[ $seed == 1 ]] || echo "_seed$seed")$([[ $seqs == 1 ]] || echo "_x$seqs")"
suffix+="$([[ $qk_norm != 1 ]] || echo "_qknorm")"
if [[ ${RECIPE_SUFFIX_ONLY:-0} == 1 ]]; then
  echo "$suffix"
  exit 0
fi
suffix+="$([[ -z ${REPEAT:-} ]] || echo "_repeat$REPEAT")"  # never overwrites the main run
suffix+="$([[ -z ${TAG:-} ]] || echo "_$TAG")"  # other backends beside a recipe's runs
model_args=()
[[ $qk_norm == 1 ]] && model_args=(--qk-norm)
read -r -a train_args <<< "${TRAIN_ARGS:-}"
runs="${RUNS_ROOT:-examples/pretrain}/runs$suffix"
resume=()
[[ ${RESUME:-0} == 1 ]] && resume=(--resume)
read -r -a backends <<< "${BACKENDS:-bf16 flamia_exact flamia_block32}"
needs_flamia=0  # every backend but the two plain PyTorch ones calls the library
for b in "${backends[@]}"; do [[ $b == bf16 || $b == sdpa ]] || needs_flamia=1; done
timing=${TIMING:-1}  # 0: no solo timing runs; summaries then take the shared runs' step times
mkdir -p "$runs/timing"
export PYTHONUNBUFFERED=1 PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
if [[ ${CARRIED_LIB:-0} == 1 ]]; then
  if [[ $needs_flamia == 1 && ! -f python/flamia/_lib/libflamia.so ]]; then
    echo "run_h200: CARRIED_LIB=1 but python/flamia/_lib/libflamia.so is missing" >&2
    exit 2
  fi
else
  scripts/install-python --no-pip
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader || true

train() {  # out-dir, backend, extra train.py arguments
  local dir=$1 b=$2
  shift 2
  python3 examples/pretrain/train.py --attention "$b" --seqs-per-step "$seqs" --seed "$seed" \
    "${model_args[@]}" "${train_args[@]}" --out-dir "$dir" "$@" >> "$dir/$b.log" 2>&1
}
for b in "${backends[@]}"; do
  # the final weights too (git-ignored, not copied back): study_h200.sh CHECKPOINT=... reads them
  train "$runs" "$b" --max-minutes "${MAX_MINUTES:-8}" "${resume[@]}" \
    --save-checkpoint "$runs/$b.pt" &
done
wait
if compgen -G "$runs/*.resume.pt" >/dev/null; then
  echo "run_h200: stopped at MAX_MINUTES; continue with RESUME=1 while the machine is warm"
  exit 0
fi
if [[ $timing == 1 ]]; then  # the mixed backends' step times mean nothing: TIMING=0
  for b in "${backends[@]}"; do train "$runs/timing" "$b" --max-minutes 0.3; done
fi
# (bench/results/pretrain.json is the headline summary, built by hand from the parity runs: the
# default recipe's own summary is pretrain_x1)
summary=${RESULTS_DIR:-bench/results}/pretrain${suffix:-_x1}
results=("$runs")
if [[ " ${backends[*]} " == *" bf16 "* ]]; then
  timing_args=()
  [[ $timing == 1 ]] && timing_args=(--timing-dir "$runs/timing")
  python3 examples/pretrain/summarize.py --runs-dir "$runs" "${timing_args[@]}" \
    --runs "${backends[@]}" --out-json "$summary.json" --png "$summary.png"
  results+=("$summary.json" "$summary.png")
else
  echo "run_h200: no bf16 run here; summarise with summarize.py next to a BF16 run's CSV"
fi
if [[ -n "${OUT:-}" ]]; then tar czf "$OUT/pretrain$suffix.tgz" --exclude="*.pt" "${results[@]}"; fi
