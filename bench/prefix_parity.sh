#!/usr/bin/env bash
# Prefix-LM masks against the same masks without the prefix, per useful FLOP, over ROUNDS rounds
# of the attention benchmark's table on one GPU, at head dim 128 (6 heads) and 64 (12 heads),
# the two head dims alternating round by round; then bench/mask_pairs.py's table (mean, spread,
# ratio and Welch's p per pair) and each mask's tile geometry (bench_attention --geometry).
#   bash bench/prefix_parity.sh
# Variables: ROUNDS (5), LOG_DIR (new; default logs/prefix-parity-DATE-TIME).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
LOG_DIR=${LOG_DIR:-logs/prefix-parity-$(date +%Y%m%d-%H%M%S)}
case "$ROUNDS" in ''|*[!0-9]*|0) echo "prefix_parity: ROUNDS must be a whole number of at least 1" >&2; exit 2;; esac
[ -e "$LOG_DIR" ] && { echo "prefix_parity: $LOG_DIR exists: name a new LOG_DIR" >&2; exit 2; }
mkdir -p "$LOG_DIR"
echo "== build ($(date +%T))"
make -j"$(nproc)" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} build/bench/bench_attention > "$LOG_DIR/build.log" 2>&1 || { tail -20 "$LOG_DIR/build.log"; exit 1; }
for r in $(seq 1 "$ROUNDS"); do
  for hd in "6 128" "12 64"; do
    set -- $hd
    echo "== round $r, head dim $2 ($(date +%T))"
    build/bench/bench_attention "$LOG_DIR/r${r}_d$2.json" --heads "$1" --head-dim "$2" > "$LOG_DIR/r${r}_d$2.txt" 2>&1 ||
      { tail -20 "$LOG_DIR/r${r}_d$2.txt"; exit 1; }
  done
done
build/bench/bench_attention --geometry > "$LOG_DIR/geometry.txt"
python3 bench/mask_pairs.py "$LOG_DIR"/r*_d*.json --out "$LOG_DIR/pairs.md" && cat "$LOG_DIR/geometry.txt"
