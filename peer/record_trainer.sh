#!/usr/bin/env bash
# Runs a modded-nanogpt record trainer (a train_gpt.py of records/track_1_short/DATE_NAME/ in the
# user's own copy of modded-nanogpt, or one of that record's logs, whose top holds the trainer's
# code) at settings of this project's runs, for a comparison with train_gpt on the same GPUs. The
# trainer is copied into OUT, a new folder outside this repository, its class Hyperparameters
# patched there (peer/record_trainer_patch.py: each field matched exactly once, else nothing
# runs), the unified diff of the patch printed, and the copy run under torchrun in OUT/run.
#   bash peer/record_trainer.sh --trainer FILE --out DIR --train GLOB --val GLOB [--gpus N]
#       [--steps N] [--val-every N] [--val-tokens N] [--seed N] [--field NAME=VALUE ...] [--dry-run]
# --trainer: the trainer's train_gpt.py, or a record's log with its code at the top.
# --out: a new (or empty) folder outside the repository; one that holds anything is refused.
# --train, --val: the training and validation shard patterns (each must match a file; made
#   absolute, since the trainer runs in OUT/run).
# --gpus: 1, 2, 4 or 8 (default 1): torchrun --standalone --nproc_per_node N.
# --steps, --val-every (0: at the end only), --val-tokens, --seed: the fields num_iterations,
#   val_loss_every, val_tokens, seed (a flag left out keeps the trainer's value); --seed is refused
#   for a trainer with no seed field (the records of 2024-12-10 and 2025-08-23 have none: their
#   runs are not seeded). --field NAME=VALUE sets another field (VALUE a Python literal).
# --dry-run: everything but the run: OUT is written and the command printed (no GPU needed).
# Variables: PYTHON_TORCH (a python3 with PyTorch; default python3).
# OUT holds: original.py (the trainer's code as it is), run/train_gpt.py (patched), patch.diff,
# command.txt (this command and the one it runs), run_info.txt (date, the SHA-256 of the given
# file, of the code and of the patched code, the fields patched, the cards' names from nvidia-smi,
# PyTorch's version), out.txt (the run's output), log.txt (the log the trainer wrote under
# run/logs/), summary.txt (peer/record_trainer_logs.py's reading of log.txt).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
PYTHON_TORCH=${PYTHON_TORCH:-python3}
prog=record_trainer
usage() {
  echo "usage: bash peer/record_trainer.sh --trainer FILE --out DIR --train GLOB --val GLOB [--gpus N] [--steps N]" >&2
  echo "       [--val-every N] [--val-tokens N] [--seed N] [--field NAME=VALUE ...] [--dry-run]" >&2
  exit 2
}
bad() { echo "$prog: $*" >&2; exit 2; }
# a whole number from LO to HI (FLAG VALUE LO HI), printed without leading zeros
whole() {
  case "$2" in ''|*[!0-9]*) bad "$1 must be a whole number from $3 to $4, got '$2'";; esac
  local v=${2#"${2%%[!0]*}"}; v=${v:-0}
  if [ ${#v} -gt 15 ] || [ "$v" -lt "$3" ] || [ "$v" -gt "$4" ]; then bad "$1 must be a whole number from $3 to $4, got '$2'"; fi
  echo "$v"
}
TRAINER=; OUT=; TRAIN=; VAL=; GPUS=1; DRY=0; seen=
patch_flags=()
given=("$0" "$@")
while [ $# -gt 0 ]; do
  flag=$1
  case "$flag" in
    --dry-run) DRY=1; shift; continue;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0;;
    --trainer|--out|--train|--val|--gpus|--steps|--val-every|--val-tokens|--seed|--field)
      [ $# -ge 2 ] || bad "$flag needs a value"
      case " $seen " in *" $flag "*) [ "$flag" = --field ] || bad "$flag is given twice";; esac
      seen="$seen $flag"; val=$2; shift 2;;
    *) echo "$prog: unknown flag '$flag'" >&2; usage;;
  esac
  case "$flag" in
    --trainer) TRAINER=$val;;
    --out) OUT=$val;;
    --train) TRAIN=$val;;
    --val) VAL=$val;;
    --gpus) GPUS=$(whole --gpus "$val" 1 8) || exit 2
            [ $((8 % GPUS)) -eq 0 ] || bad "--gpus $GPUS does not divide the records' batch of 8 sequences: 1, 2, 4 or 8";;
    --steps) n=$(whole --steps "$val" 1 10000000) || exit 2; patch_flags+=(--steps "$n");;
    --val-every) n=$(whole --val-every "$val" 0 10000000) || exit 2; patch_flags+=(--val-every "$n");;
    --val-tokens) n=$(whole --val-tokens "$val" 1 10000000000000) || exit 2; patch_flags+=(--val-tokens "$n");;
    --seed) n=$(whole --seed "$val" 0 4294967295) || exit 2; patch_flags+=(--seed "$n");;
    --field) patch_flags+=(--field "$val");;
  esac
done
for f in --trainer:TRAINER --out:OUT --train:TRAIN --val:VAL; do
  var=${f#*:}; [ -n "${!var}" ] || { echo "$prog: ${f%%:*} is required" >&2; usage; }
done
[ -e "$TRAINER" ] || bad "--trainer $TRAINER: no such file"
[ -f "$TRAINER" ] || bad "--trainer $TRAINER: not a regular file"
case "$OUT$TRAIN$VAL" in *$'\n'*) bad "--out, --train and --val must each be one line";; esac
# the shard patterns, absolute (the trainer runs in OUT/run), each matching a file
abs() { case "$1" in /*) echo "$1";; *) echo "$PWD/$1";; esac; }
TRAIN=$(abs "$TRAIN"); VAL=$(abs "$VAL")
compgen -G "$TRAIN" >/dev/null || bad "--train $TRAIN matches no file"
compgen -G "$VAL" >/dev/null || bad "--val $VAL matches no file"
patch_flags+=(--train "$TRAIN" --val "$VAL")
# OUT: outside the repository, new or empty
OUT=$(realpath -m -- "$OUT") || bad "--out: cannot resolve the folder"
case "$OUT/" in "$ROOT"/*) bad "--out $OUT is inside the repository ($ROOT): the record's code stays out of it; name a folder outside";; esac
if [ -e "$OUT" ] || [ -L "$OUT" ]; then
  [ -d "$OUT" ] && [ ! -L "$OUT" ] || bad "--out $OUT exists and is not a folder"
  if [ -e "$OUT/run_info.txt" ] || [ -e "$OUT/run" ]; then bad "--out $OUT already holds a run (run_info.txt, run/): name a new folder"; fi
  [ -z "$(ls -A -- "$OUT")" ] || bad "--out $OUT is not empty: name a new folder"
fi
torchrun=("$PYTHON_TORCH" -m torch.distributed.run --standalone --nproc_per_node "$GPUS" train_gpt.py)
if [ "$DRY" = 0 ]; then
  . "$ROOT/scripts/gpu_count.sh"  # gpu_count
  nvidia-smi -L >/dev/null 2>&1 || { echo "$prog: no GPU on this machine (nvidia-smi finds none); --dry-run writes OUT without running" >&2; exit 1; }
  visible=$(gpu_count)
  [ "$visible" -ge "$GPUS" ] || bad "--gpus asks for $GPUS GPU(s), $visible visible (nvidia-smi -L, CUDA_VISIBLE_DEVICES)"
  "$PYTHON_TORCH" -c 'import torch, torch.distributed.run' 2>/dev/null || bad "PYTHON_TORCH=$PYTHON_TORCH cannot import torch (the record trainers need PyTorch)"
fi

# the patch, made in a folder of its own and moved into OUT only when it succeeded
stage=$(mktemp -d "${TMPDIR:-/tmp}/record_trainer.XXXXXX") || { echo "$prog: cannot make a temporary folder" >&2; exit 1; }
trap 'rm -rf -- "$stage"' EXIT
mkdir -p "$stage/run/logs/final"  # the trainers write logs/ID.txt or logs/final/ID.txt and make neither folder's parent
python3 "$ROOT/peer/record_trainer_patch.py" patch "$TRAINER" "$stage/original.py" "$stage/run/train_gpt.py" \
  "${patch_flags[@]}" > "$stage/patch.diff" 2> "$stage/patched.txt"
rc=$?
if [ "$rc" != 0 ]; then cat "$stage/patched.txt" >&2; exit "$rc"; fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "trainer: $(realpath -- "$TRAINER")"
  echo "sha256 of the trainer's file: $(sha256sum < "$TRAINER" | cut -d' ' -f1)"
  echo "sha256 of its code (original.py): $(sha256sum < "$stage/original.py" | cut -d' ' -f1)"
  echo "sha256 of the patched code (run/train_gpt.py): $(sha256sum < "$stage/run/train_gpt.py" | cut -d' ' -f1)"
  echo "gpus: $GPUS"
  sed 's/^patched: /field: /' "$stage/patched.txt"
} > "$stage/run_info.txt"
{
  printf '%q ' "${given[@]}"; echo
  printf 'cd %q && NCCL_NVLS_ENABLE=0 ' "$OUT/run"; printf '%q ' "${torchrun[@]}"; echo
} > "$stage/command.txt"
rm -f "$stage/patched.txt"
mkdir -p -- "$OUT" || bad "--out $OUT: cannot make it"
mv -- "$stage"/* "$OUT"/ || { echo "$prog: cannot move the patched trainer into $OUT" >&2; exit 1; }
cat "$OUT/patch.diff"
cat "$OUT/run_info.txt"
if [ "$DRY" = 1 ]; then
  echo "card: none (--dry-run: not run)" >> "$OUT/run_info.txt"
  echo "$prog: --dry-run: not run; the command (command.txt):"
  sed -n 2p "$OUT/command.txt"
  exit 0
fi
{
  echo "cards: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n "$GPUS" | paste -sd, -)"
  echo "pytorch: $("$PYTHON_TORCH" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
} >> "$OUT/run_info.txt"
echo "== $OUT/run: ${torchrun[*]} ($(date +%T))"
(cd "$OUT/run" && NCCL_NVLS_ENABLE=0 "${torchrun[@]}") 2>&1 | tee "$OUT/out.txt"
rc=$?
echo "end: $(date -u +%Y-%m-%dT%H:%M:%SZ), exit status $rc" >> "$OUT/run_info.txt"
mapfile -t logs < <(find "$OUT/run/logs" -type f -name '*.txt')
if [ "${#logs[@]}" != 1 ]; then
  echo "$prog: the trainer wrote ${#logs[@]} logs under $OUT/run/logs, want 1 (out.txt holds its output)" >&2; exit 1
fi
cp -- "${logs[0]}" "$OUT/log.txt" || exit 1
echo "log: ${logs[0]#"$OUT/"} (copied to log.txt)" >> "$OUT/run_info.txt"
[ "$rc" = 0 ] || { echo "$prog: the trainer ended with status $rc (out.txt holds its output)" >&2; exit 1; }
python3 "$ROOT/peer/record_trainer_logs.py" "$OUT/log.txt" | tee "$OUT/summary.txt"
