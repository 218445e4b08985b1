#!/usr/bin/env bash
# One shape and mask against PyTorch FlexAttention (and cuDNN, for dense causal) on the same GPU,
# in one command: build/bench/bench_attention with the flags given, then bench/compare_flex.py on
# its output, right after it. The flags are bench_attention's (`build/bench/bench_attention
# --help`): --T, --heads, --head-dim, --causal, --window, --window-mask, --window-granularity,
# --docs, --prefix, --name. With no flags, its table of masks at the speedrun's shape.
#   bash bench/vs_flex.sh --T 32768 --heads 16 --head-dim 64 --causal 1 --window 512 --docs 1
# Variables: LOG_DIR (new; default logs/vs-flex-DATE-TIME), PYTHON_TORCH (a python3 with PyTorch;
# default python3), GIT_COMMIT (the commit the build names, where git metadata cannot tell it).
# The flags are checked before anything is built or timed (bench_attention --geometry, which
# needs no GPU); the ratio table is printed last and kept in LOG_DIR/compare_flex.md.
set -u -o pipefail
cd "$(dirname "$0")/.."
PYTHON_TORCH=${PYTHON_TORCH:-python3}
LOG_DIR=${LOG_DIR:-logs/vs-flex-$(date +%Y%m%d-%H%M%S)}
BENCH=build/bench/bench_attention
args=("$@")
for ((i = 0; i < ${#args[@]}; i += 2)); do  # flags come as --name value; the output goes to LOG_DIR
  a=${args[i]}
  case "$a" in
    --geometry|-h|--help) echo "vs_flex: $a is not a shape or mask flag (see build/bench/bench_attention --help)" >&2; exit 2;;
    --*=*) echo "vs_flex: $a: give flags as --name value" >&2; exit 2;;
    --*) [ $((i + 1)) -lt ${#args[@]} ] || { echo "vs_flex: $a needs a value" >&2; exit 2; };;
    *) echo "vs_flex: $a: not a flag (flags come as --name value; the results go to LOG_DIR)" >&2; exit 2;;
  esac
done
[ -e "$LOG_DIR" ] && { echo "vs_flex: $LOG_DIR exists: name a new LOG_DIR" >&2; exit 2; }
make -j"$(nproc)" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} "$BENCH" > /dev/null 2>&1 || { echo "vs_flex: building $BENCH failed (run make $BENCH)" >&2; exit 1; }
# the flags' names and values, checked without a GPU: a bad one ends here with bench_attention's message
"$BENCH" --geometry "$@" "$LOG_DIR/ours.json" > /dev/null || exit $?
nvidia-smi -L > /dev/null 2>&1 || { echo "vs_flex: no GPU on this machine (nvidia-smi finds none)" >&2; exit 1; }
"$PYTHON_TORCH" -c 'import torch' 2> /dev/null || { echo "vs_flex: $PYTHON_TORCH has no PyTorch (set PYTHON_TORCH)" >&2; exit 1; }
mkdir -p "$LOG_DIR"
echo "== ours ($(date +%T))"
"$BENCH" "$@" "$LOG_DIR/ours.json" > "$LOG_DIR/ours.txt" 2>&1 || { tail -20 "$LOG_DIR/ours.txt"; exit 1; }
echo "== FlexAttention ($(date +%T); compiling: on a machine's first run this takes minutes)"
"$PYTHON_TORCH" bench/compare_flex.py "$LOG_DIR/ours.json" "$LOG_DIR/compare_flex.md" > "$LOG_DIR/compare_flex.log" 2>&1 ||
  { tail -20 "$LOG_DIR/compare_flex.log"; exit 1; }
cat "$LOG_DIR/compare_flex.md"
echo "vs_flex: logs in $LOG_DIR"
