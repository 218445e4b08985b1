#!/usr/bin/env bash
# The whole speedrun, train_gpt against its PyTorch peer (peer/torch_peer.py: torch.compile,
# FlexAttention, the record's numerics) on the same GPUs: each trainer's full run of the speedrun
# preset (1480 steps, the record's window schedule, cooldown and momentum warm-up, validation every
# 125 steps on 10,485,760 tokens), then a table of each run's train_time, step average, final
# validation loss, peak memory and start-up. The data are FineWeb-like synthetic shards
# (scripts/synthetic_shards.py: 100 million training tokens, cycled; 11 million validation tokens),
# made in SHARDS on first use: their loss means nothing, the time and memory do.
#   GPUS=4 bash peer/peer_full_run.sh                                    # both runs, one after the other
#   GPUS=4 RUNS=train_gpt LOG_DIR=logs/full bash peer/peer_full_run.sh   # one run at a time,
#   GPUS=4 RUNS=peer LOG_DIR=logs/full bash peer/peer_full_run.sh        # into one folder
# A run whose log already ends on its final validation is kept, not run again, so a folder is
# filled one run at a time and the table covers whatever it holds; a log that stops short (an
# interrupted run) is moved into LOG_DIR/incomplete/ and the run starts over. A log of another GPU
# count, step count or data in LOG_DIR is refused before anything runs (peer/full_run_logs.py,
# which also makes the table); the table leaves out a run that has not finished.
# Variables: GPUS (1: 1, 2, 4 or 8; N > 1 runs train_gpt under `mpirun -np N` and the peer under
# torchrun, NCCL_NVLS_ENABLE=0 for both), RUNS ("train_gpt peer": which to run, in that order),
# STEPS (1480; fewer for a trial: every schedule scales to the step count), LOG_DIR (default
# logs/full-DATE-TIME), SHARDS (data/synthetic_full: a folder of scripts/synthetic_shards.py's
# shards, made there if it does not exist), PYTHON_TORCH (a python3 with PyTorch; default python3).
# Logs: train_gpt_gN.txt, peer_gN.txt (each with .jsonl and .out), summary.txt.
set -u -o pipefail
cd "$(dirname "$0")/.."
GPUS=${GPUS:-1}; RUNS=${RUNS:-train_gpt peer}; STEPS=${STEPS:-1480}; PYTHON_TORCH=${PYTHON_TORCH:-python3}
LOG_DIR=${LOG_DIR:-logs/full-$(date +%Y%m%d-%H%M%S)}; SHARDS=${SHARDS:-data/synthetic_full}
. scripts/env_numbers.sh  # need_int
. scripts/gpu_count.sh    # gpu_count
need_int peer_full_run GPUS 1 8
[ $((8 % GPUS)) -eq 0 ] || { echo "peer_full_run: GPUS: $GPUS does not divide the batch of 8 sequences; counts that work: 1, 2, 4, 8" >&2; exit 2; }
need_int peer_full_run STEPS 11 1000000  # steps 1-10 are not timed
runs=()
for r in $RUNS; do
  case "$r" in train_gpt|peer) ;; *) echo "peer_full_run: RUNS: unknown run '$r' (train_gpt, peer)" >&2; exit 2;; esac
  for s in "${runs[@]}"; do [ "$s" != "$r" ] || { echo "peer_full_run: RUNS: $r is listed twice" >&2; exit 2; }; done
  runs+=("$r")
done
[ "${#runs[@]}" -ge 1 ] || { echo "peer_full_run: RUNS names no run (train_gpt, peer)" >&2; exit 2; }
if [ -e "$LOG_DIR" ] && [ ! -d "$LOG_DIR" ]; then echo "peer_full_run: LOG_DIR $LOG_DIR exists and is not a folder" >&2; exit 2; fi
if [ -e "$SHARDS" ] && ! { compgen -G "$SHARDS/synth_train_*.bin" && compgen -G "$SHARDS/synth_val_*.bin"; } >/dev/null; then
  echo "peer_full_run: SHARDS $SHARDS holds no synthetic shards (synth_train_*.bin, synth_val_*.bin): name a new folder" >&2; exit 2
fi
TRAIN="$SHARDS/synth_train_*.bin"; VAL="$SHARDS/synth_val_*.bin"
logs() {  # MODE: peer/full_run_logs.py over LOG_DIR for this configuration
  python3 peer/full_run_logs.py "$1" "$LOG_DIR" "$GPUS" "$STEPS" "$TRAIN"
}
if [ -d "$LOG_DIR" ]; then logs check || exit 2; fi

complete() {  # LOG: the text log ends its run with the final validation
  [ -f "$1" ] && grep -q "^step:$STEPS/$STEPS val_loss" "$1"
}
todo=()
for r in "${runs[@]}"; do complete "$LOG_DIR/${r}_g$GPUS.txt" || todo+=("$r"); done

if [ "${#todo[@]}" -gt 0 ]; then
  nvidia-smi -L >/dev/null 2>&1 || { echo "peer_full_run: no GPU on this machine (nvidia-smi finds none)" >&2; exit 1; }
  visible=$(gpu_count)
  [ "$visible" -ge "$GPUS" ] || { echo "peer_full_run: GPUS asks for $GPUS GPU(s), $visible visible (nvidia-smi -L, CUDA_VISIBLE_DEVICES)" >&2; exit 2; }
  build=0
  for r in "${todo[@]}"; do
    if [ "$r" = peer ]; then
      "$PYTHON_TORCH" -c 'import torch' 2>/dev/null || { echo "peer_full_run: PYTHON_TORCH=$PYTHON_TORCH cannot import torch (the peer needs PyTorch)" >&2; exit 2; }
    else
      build=1
      if [ "$GPUS" -gt 1 ]; then command -v mpirun >/dev/null || { echo "peer_full_run: GPUS=$GPUS: mpirun (for train_gpt) not found" >&2; exit 2; }; fi
    fi
  done
  mkdir -p -- "$LOG_DIR" || { echo "peer_full_run: LOG_DIR $LOG_DIR: cannot make it" >&2; exit 2; }
  if [ ! -e "$SHARDS" ]; then
    echo "== synthetic shards in $SHARDS ($(date +%T))"
    python3 scripts/synthetic_shards.py "$SHARDS" --train-tokens 100000000 --val-tokens 11000000 || exit 1
  fi
  if [ "$build" = 1 ]; then
    echo "== build ($(date +%T))"
    make -j"$(nproc)" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} train_gpt > "$LOG_DIR/build.log" 2>&1 || { tail -20 "$LOG_DIR/build.log"; exit 1; }
  fi
  export NCCL_NVLS_ENABLE=0  # NVLink multicast off, as for every multi-GPU run of this project
  common=(--train-data "$TRAIN" --val-data "$VAL" --steps "$STEPS")
  for r in "${todo[@]}"; do
    name="${r}_g$GPUS"
    for f in "$LOG_DIR/$name.txt" "$LOG_DIR/$name.jsonl" "$LOG_DIR/$name.out"; do
      if [ -e "$f" ]; then
        { mkdir -p "$LOG_DIR/incomplete" && mv -- "$f" "$LOG_DIR/incomplete/$(basename "$f").$(date +%s)"; } || exit 1
      fi
    done
    if [ "$r" = train_gpt ]; then
      if [ "$GPUS" = 1 ]; then cmd=(./train_gpt --preset speedrun)
      else cmd=(mpirun --allow-run-as-root -np "$GPUS" -x NCCL_NVLS_ENABLE=0 ./train_gpt --preset speedrun); fi
    else
      if [ "$GPUS" = 1 ]; then cmd=("$PYTHON_TORCH" peer/torch_peer.py --numerics record)
      else cmd=("$PYTHON_TORCH" -m torch.distributed.run --standalone --nproc_per_node "$GPUS" peer/torch_peer.py --numerics record); fi
    fi
    echo "== $name: $STEPS steps ($(date +%T))"
    "${cmd[@]}" "${common[@]}" --log-file "$LOG_DIR/$name.txt" > "$LOG_DIR/$name.out" 2>&1 || { tail -20 "$LOG_DIR/$name.out"; exit 1; }
  done
fi

# the table, written to summary.txt only when every log in the folder reads as this configuration's
table=$(logs table) || exit 1
echo "$table" | tee "$LOG_DIR/summary.txt"
