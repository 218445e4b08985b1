#!/usr/bin/env bash
# The whole speedrun, train_gpt against its PyTorch peer (peer/torch_peer.py: torch.compile,
# FlexAttention, the record's numerics) on the same GPUs: each trainer's full run of the speedrun
# preset (1480 steps, the record's window schedule, cooldown and momentum warm-up, validation every
# 125 steps on 10,485,760 tokens), then a table of each run's train_time, step average, final
# validation loss, peak memory and start-up. The data are FineWeb-like synthetic shards
# (scripts/synthetic_shards.py: 100 million training tokens, cycled; 11 million validation tokens),
# made in data/synthetic_full on first use: their loss means nothing, the time and memory do.
#   GPUS=4 bash peer/peer_full_run.sh                                    # both runs, one after the other
#   GPUS=4 RUNS=train_gpt LOG_DIR=logs/full bash peer/peer_full_run.sh   # one run at a time,
#   GPUS=4 RUNS=peer LOG_DIR=logs/full bash peer/peer_full_run.sh        # into one folder
# A run whose log already ends on its final validation is kept, not run again, so a folder is
# filled one run at a time and the table covers whatever it holds; a log that stops short (an
# interrupted run) is moved into LOG_DIR/incomplete/ and the run starts over. The table leaves out
# a run that has not finished, and refuses logs of another GPU count, step count or data.
# Variables: GPUS (1: 1, 2, 4 or 8; N > 1 runs train_gpt under `mpirun -np N` and the peer under
# torchrun, NCCL_NVLS_ENABLE=0 for both), RUNS ("train_gpt peer": which to run, in that order),
# STEPS (1480; fewer for a trial: every schedule scales to the step count), LOG_DIR (default
# logs/full-DATE-TIME), PYTHON_TORCH (a python3 with PyTorch; default python3).
# Logs: train_gpt_gN.txt, peer_gN.txt (each with .jsonl and .out), summary.txt.
set -u -o pipefail
cd "$(dirname "$0")/.."
GPUS=${GPUS:-1}; RUNS=${RUNS:-train_gpt peer}; STEPS=${STEPS:-1480}; PYTHON_TORCH=${PYTHON_TORCH:-python3}
LOG_DIR=${LOG_DIR:-logs/full-$(date +%Y%m%d-%H%M%S)}
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
DATA=data/synthetic_full
TRAIN="$DATA/synth_train_*.bin"; VAL="$DATA/synth_val_*.bin"

complete() {  # LOG: the text log ends its run with the final validation
  [ -f "$1" ] && grep -q "^step:$STEPS/$STEPS val_loss" "$1"
}
todo=()
for r in "${runs[@]}"; do complete "$LOG_DIR/${r}_g$GPUS.txt" || todo+=("$r"); done

if [ "${#todo[@]}" -gt 0 ]; then
  nvidia-smi -L >/dev/null 2>&1 || { echo "peer_full_run: no GPU on this machine (nvidia-smi finds none)" >&2; exit 1; }
  visible=$(gpu_count)
  [ "$visible" -ge "$GPUS" ] || { echo "peer_full_run: GPUS asks for $GPUS GPUs, $visible visible (nvidia-smi -L, CUDA_VISIBLE_DEVICES)" >&2; exit 2; }
  if [ "$GPUS" -gt 1 ]; then command -v mpirun >/dev/null || { echo "peer_full_run: GPUS=$GPUS: mpirun (for train_gpt) not found" >&2; exit 2; }; fi
  for r in "${todo[@]}"; do
    if [ "$r" = peer ]; then
      "$PYTHON_TORCH" -c 'import torch' 2>/dev/null || { echo "peer_full_run: PYTHON_TORCH=$PYTHON_TORCH cannot import torch (the peer needs PyTorch)" >&2; exit 2; }
    fi
  done
  mkdir -p -- "$LOG_DIR" || { echo "peer_full_run: LOG_DIR $LOG_DIR: cannot make it" >&2; exit 2; }
  if [ ! -d "$DATA" ]; then
    echo "== synthetic shards in $DATA ($(date +%T))"
    python3 scripts/synthetic_shards.py "$DATA" --train-tokens 100000000 --val-tokens 11000000 || exit 1
  fi
  echo "== build ($(date +%T))"
  make -j"$(nproc)" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} train_gpt > "$LOG_DIR/build.log" 2>&1 || { tail -20 "$LOG_DIR/build.log"; exit 1; }
  export NCCL_NVLS_ENABLE=0  # NVLink multicast off, as for every multi-GPU run of this project
  common=(--train-data "$TRAIN" --val-data "$VAL" --steps "$STEPS")
  for r in "${todo[@]}"; do
    name="${r}_g$GPUS"
    mkdir -p "$LOG_DIR/incomplete"
    for f in "$LOG_DIR/$name.txt" "$LOG_DIR/$name.jsonl" "$LOG_DIR/$name.out"; do
      [ -e "$f" ] && mv "$f" "$LOG_DIR/incomplete/$(basename "$f").$(date +%s)"
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
table=$(python3 - "$LOG_DIR" "$GPUS" "$STEPS" "$TRAIN" <<'EOF'
import json, os, sys
d, gpus, steps, train = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows, bad = [], []
for trainer in ("train_gpt", "peer"):
    path = os.path.join(d, f"{trainer}_g{gpus}.jsonl")
    if not os.path.isfile(path):
        continue
    try:
        ev = [json.loads(line) for line in open(path)]
    except (OSError, ValueError) as e:
        bad.append(f"{path}: not JSON lines ({e})")
        continue
    conf = ev[0] if ev and ev[0].get("event") == "config" else {}
    want = {"world_size": gpus, "steps": steps, "train_data": train}
    off = [f"{k} {conf.get(k)!r} (want {v!r})" for k, v in want.items() if conf.get(k) != v]
    last = [e for e in ev if e.get("event") == "val" and e.get("step") == steps]
    summ = next((e for e in ev if e.get("event") == "summary"), None)
    if off:
        bad.append(f"{path}: another configuration's log: " + ", ".join(off))
    elif not last or summ is None:
        print(f"peer_full_run: {path}: the run did not finish (no validation at step {steps} or no summary): left out",
              file=sys.stderr)
    else:
        start = next((e["startup_s"] for e in ev if e.get("event") == "startup"), float("nan"))
        t = last[0]["train_time_ms"] / 1000
        rows.append((trainer, t, 1000 * t / (steps - 10), last[0]["val_loss"], summ["peak_memory_mib"], start))
for b in bad:
    print(f"peer_full_run: {b}", file=sys.stderr)
if bad:
    sys.exit(1)
if not rows:
    print(f"peer_full_run: {d} holds no finished run on {gpus} GPU(s)", file=sys.stderr)
    sys.exit(1)
print(f"{gpus} GPU(s), {steps} steps:")
print(f"{'run':<10} {'train_time s':>13} {'step_avg ms':>12} {'final val':>10} {'peak MiB':>9} {'start-up s':>11}")
for name, t, avg, val, mem, start in rows:
    print(f"{name:<10} {t:>13.1f} {avg:>12.2f} {val:>10.4f} {mem:>9.0f} {start:>11.1f}")
if len(rows) == 2:
    (_, t1, _, _, m1, _), (_, t2, _, _, m2, _) = rows
    print(f"train_gpt / peer: train_time {t1 / t2:.3f}, peak memory {m1 / m2:.3f}")
EOF
) || exit 1
echo "$table" | tee "$LOG_DIR/summary.txt"
