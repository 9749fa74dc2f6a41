#!/usr/bin/env bash
# The gradient-error study on a trained 63M model (GPU): trains the BF16 run of the lower-noise
# recipe (4 x 8k tokens per step, seed 1) to its end with a checkpoint, then measures every
# attention variant of investigate_divergence.py against float64 on that model's activations
# (one 8k-token sequence; all ten layers). An ablation training run (ABLATION_ARGS, train.py
# arguments) can share the GPU meanwhile, stopped after ABLATION_MINUTES.
#
#   examples/pretrain/study_h200.sh
#   ABLATION_ARGS="--attention flamia_exact --precision fp8-bf16grad" examples/pretrain/study_h200.sh
#   QK_NORM=1 examples/pretrain/study_h200.sh   # the model with QK-norm -> runs_study_qknorm/
#   CHECKPOINT=examples/pretrain/runs_x4_qknorm/bf16.pt examples/pretrain/study_h200.sh
#       # the study on a run_h200.sh run's weights (no training here)
#
# Four layers' q, k, v, dO (first 2,048 tokens) also go to $OUT/dump/ for `investigate_divergence.py
# errors --from-dump` on any machine.
#
# Results (study JSON and log, CSVs) are copied to $OUT when it is set.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
qk_norm=()
[[ ${QK_NORM:-0} == 1 ]] && qk_norm=(--qk-norm)
runs=examples/pretrain/runs_study$([[ ${QK_NORM:-0} != 1 ]] || echo _qknorm)
if [[ -n ${CHECKPOINT:-} ]]; then  # named after the run directory the weights come from
  [[ -f $CHECKPOINT ]] || { echo "study_h200: no checkpoint $CHECKPOINT" >&2; exit 1; }
  runs=examples/pretrain/study_of_$(basename "$(dirname "$CHECKPOINT")")
fi
mkdir -p "$runs/ablation"
export PYTHONUNBUFFERED=1 PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
scripts/install-python --no-pip
variants=(bf16 bf16-fp8qk bf16-fp8qkv flamia-exact flamia-block32 fp8 fp8-block32 fp8-bf16grad
  fp8-firstkey fp8-fwdonly fp8-bwdonly fp8-qkexact fp8-pvexact fp8-dcons)
train=(python3 examples/pretrain/train.py --seqs-per-step 4 --seed 1 "${qk_norm[@]}")
ablation_pid=
if [[ -n ${ABLATION_ARGS:-} ]]; then
  # shellcheck disable=SC2086
  "${train[@]}" $ABLATION_ARGS --out-dir "$runs/ablation" \
    --max-minutes "${ABLATION_MINUTES:-8}" > "$runs/ablation/train.log" 2>&1 &
  ablation_pid=$!
fi
checkpoint=${CHECKPOINT:-$runs/bf16.pt}
[[ -f $checkpoint ]] || "${train[@]}" --attention bf16 --out-dir "$runs" \
  --save-checkpoint "$checkpoint" > "$runs/bf16.log" 2>&1
dump=()
[[ -n ${OUT:-} ]] && dump=(--dump "$OUT/dump" --dump-layers 0 3 6 9 --dump-tokens 2048)
rc=0
python3 examples/pretrain/investigate_divergence.py errors --checkpoint "$checkpoint" \
  --device cuda --seqs 1 --variants "${variants[@]}" --json "$runs/study.json" "${dump[@]}" \
  2>&1 | tee "$runs/study.log" || rc=$?
if [[ -n $ablation_pid ]]; then wait "$ablation_pid" || rc=$?; fi
if [[ -n ${OUT:-} ]]; then
  tar czf "$OUT/study.tgz" "$runs"/*.json "$runs"/*.log "$runs"/*.csv "$runs"/ablation/*.csv \
    "$runs"/ablation/*.json "$runs"/ablation/*.log 2>/dev/null || true
fi
exit "$rc"
