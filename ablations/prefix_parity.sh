#!/usr/bin/env bash
# Prefix-LM masks against the same masks without the prefix, per useful FLOP, on one GPU.
# Each pair is measured by itself: one bench_attention run per mask, the two members of a pair
# back to back and in the opposite order every other round, so that neither member always runs
# first, or right after an expensive mask (a hot GPU clocks lower, so in the table mode a mask
# reads slower right after dense causal than the same mask elsewhere). Head dims 128 (6 heads)
# and 64 (12 heads).
# Then ablations/mask_pairs.py's table (mean, spread, ratio and Welch's p per pair) and each mask's
# tile geometry (bench_attention --geometry), which says how much of a gap the tiles explain.
#   bash ablations/prefix_parity.sh
# Variables: ROUNDS (6), LOG_DIR (new; default logs/prefix-parity-DATE-TIME).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-6}
LOG_DIR=${LOG_DIR:-logs/prefix-parity-$(date +%Y%m%d-%H%M%S)}
. scripts/env_numbers.sh
need_int prefix_parity ROUNDS 1 1000
[ -e "$LOG_DIR" ] && { echo "prefix_parity: $LOG_DIR exists: name a new LOG_DIR" >&2; exit 2; }
mkdir -p "$LOG_DIR"
echo "== build ($(date +%T))"
make -j"$(nproc)" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} build/bench/bench_attention > "$LOG_DIR/build.log" 2>&1 || { tail -20 "$LOG_DIR/build.log"; exit 1; }
# the masks without the prefix; each pair adds --prefix 256 to one of them
PAIRS=("--causal 1 --window 1024 --docs 1"
       "--causal 1 --window 8 --window-granularity block --docs 1"
       "--causal 1 --docs 1"
       "--causal 1 --window 1024")
PREFIX=256
one() {  # one mask: HEADS HEAD_DIM FLAGS...; appends its case to the round's JSON
  local heads=$1 hd=$2; shift 2
  build/bench/bench_attention "$LOG_DIR/case.json" --heads "$heads" --head-dim "$hd" "$@" >> "$LOG_DIR/r${r}_d$hd.txt" 2>&1 ||
    { tail -20 "$LOG_DIR/r${r}_d$hd.txt"; exit 1; }
  cat "$LOG_DIR/case.json" >> "$LOG_DIR/r${r}_d$hd.json"
}
for r in $(seq 1 "$ROUNDS"); do
  for hd in "6 128" "12 64"; do
    set -- $hd
    echo "== round $r, head dim $2 ($(date +%T))"
    for p in "${PAIRS[@]}"; do
      if [ $((r % 2)) -eq 1 ]; then
        one "$1" "$2" $p; one "$1" "$2" $p --prefix $PREFIX
      else
        one "$1" "$2" $p --prefix $PREFIX; one "$1" "$2" $p
      fi
    done
  done
done
rm -f "$LOG_DIR/case.json"
build/bench/bench_attention --geometry > "$LOG_DIR/geometry.txt"
python3 ablations/mask_pairs.py "$LOG_DIR"/r*_d*.json --out "$LOG_DIR/pairs.md" && cat "$LOG_DIR/geometry.txt"
