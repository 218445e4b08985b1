#!/usr/bin/env bash
# The mask ablation, as committed in results/mask_ablation/: q - kv < W (uni) against
# |q - kv| < W (bi), RUNS runs each (seeds 1000...), on 1 and 2 GPUs, with causal on (the
# speedrun's setting); then one pair with causal off on 1 GPU, where the two masks differ (a mask
# that lets each position see its target: --allow-target-leak runs it, and the report marks it).
# Shortened schedule on the offline corpus: the default preset (4 layers, width 256, 2 heads of
# 128, 8 sequences of 8192 tokens a step, the record's window schedule in blocks of 128, documents
# on) for STEPS steps (default 200), validation every 50 steps on 65536 GCIDE tokens.
#   TRAIN=... VAL=... (shard patterns)  GPUS=1,2  RUNS=5  STEPS=200  CAMPAIGN=logs/mask
#   bash ablations/mask_ablation.sh && python3 scripts/ab_report.py --logs-dir logs/mask/causal ...
# At the speedrun's size (results/mask_ablation/speedrun/): PRESET=speedrun, with VAL_EVERY and
# VAL_TOKENS given, and NONCAUSAL=0 to skip the causal-off pair:
#   PRESET=speedrun STEPS=20 VAL_EVERY=10 VAL_TOKENS=655360 GPUS=1 NONCAUSAL=0 CAMPAIGN=logs/mask_speedrun \
#     bash ablations/mask_ablation.sh
set -eu -o pipefail
set -f  # the patterns go to train_gpt as they are
TRAIN=${TRAIN:-data/gcide/gcide_train_*.bin}
VAL=${VAL:-data/gcide/gcide_val_*.bin}
GPUS=${GPUS:-1,2}
RUNS=${RUNS:-5}
STEPS=${STEPS:-200}
CAMPAIGN=${CAMPAIGN:-logs/mask}
PY=${PYTHON:-python3}
PRESET=${PRESET:-default}
NONCAUSAL=${NONCAUSAL:-1}
case "$PRESET" in default|speedrun|tiny) ;; *) echo "mask_ablation: PRESET must be default, speedrun or tiny" >&2; exit 2;; esac
. "$(dirname "$0")/../scripts/env_numbers.sh"
need_int mask_ablation RUNS 1 1000; need_int mask_ablation STEPS 1 1000000; need_int mask_ablation NONCAUSAL 0 1
[ -n "${VAL_EVERY:-}" ] && need_int mask_ablation VAL_EVERY 1 1000000
[ -n "${VAL_TOKENS:-}" ] && need_int mask_ablation VAL_TOKENS 1 1099511627776
COMMON=(--preset "$PRESET" --steps "$STEPS" --train-data "$TRAIN" --val-data "$VAL")
[ -n "${VAL_EVERY:-}" ] && COMMON+=(--val-every "$VAL_EVERY")
[ -n "${VAL_TOKENS:-}" ] && COMMON+=(--val-tokens "$VAL_TOKENS")
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
$PY scripts/ab_run.py --campaign "$CAMPAIGN/causal" --gpus "$GPUS" --runs "$RUNS" \
  --variant uni='--window-mask uni' --variant bi='--window-mask bi' -- "${COMMON[@]}" --causal 1
[ "$NONCAUSAL" = 0 ] && exit 0
$PY scripts/ab_run.py --campaign "$CAMPAIGN/noncausal" --gpus 1 --runs 1 \
  --variant uni='--window-mask uni' --variant bi='--window-mask bi' -- "${COMMON[@]}" --causal 0 --allow-target-leak
