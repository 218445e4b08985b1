#!/usr/bin/env bash
# Speed of this tree against another checkout of the project, on the same GPU in one run: the
# attention benchmark and the training step at the speedrun's size (window fixed at 8 blocks,
# --profile 10), alternating the two trees so that a drift of the machine falls on both.
#   bash bench/compare_trees.sh OTHER_TREE
# Variables: STEPS (20), ROUNDS (2: step runs of each tree), LOG_DIR (new; default
# logs/compare-DATE-TIME), TRAIN_DATA / VAL_DATA (default the GCIDE shards of `make data`).
set -u -o pipefail
cd "$(dirname "$0")/.."
OTHER=${1:?usage: bash bench/compare_trees.sh OTHER_TREE}
[ -f "$OTHER/Makefile" ] || { echo "compare_trees: $OTHER is not a checkout of this project" >&2; exit 2; }
STEPS=${STEPS:-20}; ROUNDS=${ROUNDS:-2}
LOG_DIR=${LOG_DIR:-logs/compare-$(date +%Y%m%d-%H%M%S)}
TRAIN_DATA=${TRAIN_DATA:-$PWD/data/gcide/gcide_train_*.bin}
VAL_DATA=${VAL_DATA:-$PWD/data/gcide/gcide_val_*.bin}
. scripts/env_numbers.sh
need_int compare_trees STEPS 12 1000000  # steps 1-10 are not timed
need_int compare_trees ROUNDS 1 1000
[ -e "$LOG_DIR" ] && { echo "compare_trees: $LOG_DIR exists: name a new LOG_DIR" >&2; exit 2; }
mkdir -p "$LOG_DIR"
LOG_DIR=$(cd "$LOG_DIR" && pwd)
set -f
echo "== build ($(date +%T))"
J=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))
(make -j"$J" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} train_gpt build/bench/bench_attention > "$LOG_DIR/build_this.log" 2>&1) & a=$!
(make -C "$OTHER" -j"$J" train_gpt build/bench/bench_attention > "$LOG_DIR/build_other.log" 2>&1) & b=$!
wait $a || { tail -20 "$LOG_DIR/build_this.log"; exit 1; }
wait $b || { tail -20 "$LOG_DIR/build_other.log"; exit 1; }
for tree in other this; do
  dir=$([ $tree = this ] && echo . || echo "$OTHER")
  echo "== attention benchmark, $tree ($(date +%T))"
  (cd "$dir" && build/bench/bench_attention "$LOG_DIR/attention_$tree.json") > "$LOG_DIR/attention_$tree.txt" 2>&1
done
for r in $(seq 1 "$ROUNDS"); do
  for tree in other this; do
    dir=$([ $tree = this ] && echo . || echo "$OTHER")
    echo "== speedrun step, $tree, round $r ($(date +%T))"
    (cd "$dir" && ./train_gpt --preset speedrun --train-data "$TRAIN_DATA" --val-data "$VAL_DATA" --steps "$STEPS" --val-every 100000 \
      --val-tokens 65536 --window-blocks 8 --profile 10 --log-file "$LOG_DIR/step_${tree}_$r.txt") > "$LOG_DIR/step_${tree}_$r.out" 2>&1
  done
done
set +f
echo "== summary ($LOG_DIR; other = $OTHER)"
paste "$LOG_DIR/attention_other.txt" "$LOG_DIR/attention_this.txt" 2>/dev/null | head -40
for f in "$LOG_DIR"/step_*.out; do
  echo "$(basename "$f" .out): $(grep -E 'timed steps' "$f" | sed 's/.*timed steps: //')"
  grep -E "attention (forward|backward)" "$f" | tr -s ' ' | head -2
done | tee "$LOG_DIR/summary.txt"
