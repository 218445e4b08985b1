#!/usr/bin/env bash
# The prefix-LM ablation, as committed in results/prefix_ablation/: causal attention against
# prefix-LM (the first P tokens of each document see each other both ways), both with the
# record's window schedule, both scored on the same targets (the predictions whose target lies in
# a prefix are dropped in both: --prefix-attention 0 keeps the causal attention with the
# prefix-LM loss rule). RUNS runs a variant (seeds 1000...), variants taking turns, on 1 GPU.
# Shortened schedule on the offline corpus: the default preset for STEPS steps (default 200),
# validation every 50 steps on 65536 GCIDE tokens.
#   TRAIN=... VAL=... (shard patterns)  PREFIX=32  RUNS=5  STEPS=200  CAMPAIGN=logs/prefix
#   bash ablations/prefix_ablation.sh && python3 scripts/ab_report.py --logs-dir logs/prefix --out results/prefix_ablation
set -eu -o pipefail
set -f  # the patterns go to train_gpt as they are
TRAIN=${TRAIN:-data/gcide/gcide_train_*.bin}
VAL=${VAL:-data/gcide/gcide_val_*.bin}
PREFIX=${PREFIX:-32}
RUNS=${RUNS:-5}
STEPS=${STEPS:-200}
CAMPAIGN=${CAMPAIGN:-logs/prefix}
PY=${PYTHON:-python3}
. "$(dirname "$0")/../scripts/env_numbers.sh"
need_int prefix_ablation PREFIX 1 1048575; need_int prefix_ablation RUNS 1 1000; need_int prefix_ablation STEPS 1 1000000
$PY scripts/ab_run.py --campaign "$CAMPAIGN" --gpus 1 --runs "$RUNS" \
  --variant causal="--prefix-tokens $PREFIX --prefix-attention 0" --variant prefix="--prefix-tokens $PREFIX" -- \
  --preset default --steps "$STEPS" --train-data "$TRAIN" --val-data "$VAL"
