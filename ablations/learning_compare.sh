#!/usr/bin/env bash
# Learning of train_gpt against its PyTorch peer (peer/torch_peer.py) at the speedrun preset:
# RUNS seeds of each, the same data, schedules and validation, logs named VARIANT_g1_rI.txt
# (run I uses seed SEED0 + I in every variant) for scripts/ab_report.py:
#   LOG_DIR=logs/learn bash ablations/learning_compare.sh
#   python3 scripts/ab_report.py --logs-dir logs/learn --out results/learning_gap/repeating
# Runs share the GPU, PARALLEL at a time (an H200 holds three of them): this measures learning
# only, never step times. A run whose log reaches its final validation is kept, so the same
# command resumes an interrupted comparison; a partial log is moved into LOG_DIR/incomplete/. A
# complete log of another seed, trainer, preset or other flags (SEED0, STEPS, DATA, ... changed,
# or a log of another trainer or preset copied in) is refused before
# anything runs (scripts/resume_check.py), never kept as the run asked for.
# Variables: LOG_DIR (required), STEPS (150), VAL_EVERY (25), VAL_TOKENS (655360), RUNS (3),
# SEED0 (0), DATA (gcide: the shards of `make data`, 30 steps' worth, so 150 steps repeat them
# five times; or a glob prefix DIR/NAME for DIR/NAME_train_*.bin and DIR/NAME_val_*.bin),
# VARIANTS ("train_gpt peer"; also peer_fp32: the peer with fp32 masters), JOBS (default every
# VARIANT:I; a subset such as "peer:0 train_gpt:1" runs only those), PARALLEL (3),
# PYTHON_TORCH (python3).
set -u -o pipefail
cd "$(dirname "$0")/.."
LOG_DIR=${LOG_DIR:?set LOG_DIR to the comparison\'s folder}
STEPS=${STEPS:-150}; VAL_EVERY=${VAL_EVERY:-25}; VAL_TOKENS=${VAL_TOKENS:-655360}; RUNS=${RUNS:-3}; SEED0=${SEED0:-0}
DATA=${DATA:-gcide}; VARIANTS=${VARIANTS:-train_gpt peer}; PARALLEL=${PARALLEL:-3}; PYTHON_TORCH=${PYTHON_TORCH:-python3}
. scripts/env_numbers.sh
need_int learning_compare STEPS 1 1000000; need_int learning_compare VAL_EVERY 1 1000000
need_int learning_compare VAL_TOKENS 1 1099511627776; need_int learning_compare RUNS 1 1000
need_int learning_compare SEED0 0 1000000000; need_int learning_compare PARALLEL 1 64
[ "$DATA" = gcide ] && DATA=data/gcide/gcide
ls $DATA"_train_"*.bin >/dev/null 2>&1 || { echo "learning_compare: DATA $DATA: no ${DATA}_train_*.bin (make data writes the GCIDE shards)" >&2; exit 2; }
if [ -z "${JOBS:-}" ]; then
  JOBS=""; for i in $(seq 0 $((RUNS - 1))); do for v in $VARIANTS; do JOBS="$JOBS $v:$i"; done; done
fi
checked=""
for job in $JOBS; do
  case "${job#*:}" in ''|*[!0-9]*) echo "learning_compare: JOBS: $job is not VARIANT:RUN" >&2; exit 2;; esac
  case ${job%%:*} in train_gpt|peer|peer_fp32) ;; *) echo "learning_compare: unknown variant in $job (VARIANTS, JOBS)" >&2; exit 2;; esac
  RUN=${job#*:}; need_int "learning_compare: JOBS $job" RUN 0 999
  checked="$checked ${job%%:*}:$RUN"
done
JOBS=$checked
mkdir -p "$LOG_DIR/incomplete"
common=(--train-data "${DATA}_train_*.bin" --val-data "${DATA}_val_*.bin" --steps "$STEPS" --val-every "$VAL_EVERY" --val-tokens "$VAL_TOKENS")
variant() {  # VARIANT: sets exe (the program), own (its flags: a kept log must record them) and trainer (as resume_check.py names it)
  case $1 in
    train_gpt) exe=(./train_gpt); own=(--preset speedrun); trainer=train_gpt;;
    peer) exe=("$PYTHON_TORCH" peer/torch_peer.py); own=(--numerics record); trainer=torch_peer;;
    peer_fp32) exe=("$PYTHON_TORCH" peer/torch_peer.py); own=(--numerics fp32); trainer=torch_peer;;
  esac
}
one() {  # VARIANT I
  local v=$1 i=$2 log="$LOG_DIR/${1}_g1_r${2}.txt"
  if [ -f "$log" ] && grep -q "^step:$STEPS/$STEPS val_loss" "$log"; then echo "kept: $log"; return 0; fi
  for f in "$log" "${log%.txt}.jsonl"; do [ -e "$f" ] && mv "$f" "$LOG_DIR/incomplete/$(basename "$f").$(date +%s)"; done
  variant "$v"
  echo "start: $v run $i, seed $((SEED0 + i)) ($(date +%T))"
  "${exe[@]}" "${own[@]}" "${common[@]}" --seed $((SEED0 + i)) --log-file "$log" > "$LOG_DIR/${v}_g1_r${i}.out" 2>&1
  local rc=$?
  echo "end: $v run $i: exit $rc, $(grep "^step:$STEPS/$STEPS val_loss" "$log" 2>/dev/null || echo 'no final validation') ($(date +%T))"
  return $rc
}
# a complete log is kept only when it is the run asked for: its configuration records this seed,
# this variant's trainer and these flags (--preset speedrun among train_gpt's) (scripts/resume_check.py); any other is refused, naming it, before anything runs
kept_bad=0
for job in $JOBS; do
  v=${job%%:*}; i=${job#*:}; log="$LOG_DIR/${v}_g1_r${i}.txt"
  if [ -f "$log" ] && grep -q "^step:$STEPS/$STEPS val_loss" "$log"; then
    variant "$v"
    python3 scripts/resume_check.py "$log" $((SEED0 + i)) $trainer "${own[@]}" "${common[@]}" || kept_bad=1
  fi
done
[ $kept_bad = 0 ] || { echo "learning_compare: $LOG_DIR holds complete logs of other runs (above); nothing was run" >&2; exit 1; }
failed=0
for job in $JOBS; do
  v=${job%%:*}; i=${job#*:}
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || failed=1; done
  one "$v" "$i" &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
wait
exit $failed
