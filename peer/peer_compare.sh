#!/usr/bin/env bash
# The speedrun step of train_gpt against its PyTorch peer (peer/torch_peer.py: torch.compile,
# FlexAttention, the record's numerics) on the same GPUs in one run: train_gpt, the peer, then
# train_gpt again, so that a drift of the machine shows. Each runs the speedrun preset with the
# window fixed at 8 blocks for STEPS steps; the figure is the median of the timed steps (11 on,
# validation excluded, from the JSON logs' full-precision times).
#   bash peer/peer_compare.sh
#   GPUS=1,2,4 bash peer/peer_compare.sh     # the three runs on 1 GPU, then on 2, then on 4
# Variables: STEPS (30; 12 to 100000), DATA (synthetic: FineWeb-like shards of
# scripts/synthetic_shards.py, made in data/synthetic on first use; or gcide: the shards of `make
# data`), GPUS (1: a comma-separated list of GPU counts, each dividing the batch of 8 sequences; on
# N > 1 train_gpt runs under `mpirun -np N` and the peer under torchrun, NCCL_NVLS_ENABLE=0 for
# both), LOG_DIR (new; default logs/peer-DATE-TIME), PYTHON_TORCH (a python3 with PyTorch; default
# python3), RECORD_MS (1102; 1 to 1000000: the 2024-12-10 record trainer's step on one H200 on the
# synthetic shards, for the peer's ratio on one GPU).
# Logs: train_gpt_1, peer, train_gpt_2 (.txt, .jsonl, .out) for one GPU, the same with _gN for N;
# summary.txt: each count's runs, then one table of every count.
set -u -o pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-30}; DATA=${DATA:-synthetic}; PYTHON_TORCH=${PYTHON_TORCH:-python3}; RECORD_MS=${RECORD_MS:-1102}; GPUS=${GPUS:-1}
LOG_DIR=${LOG_DIR:-logs/peer-$(date +%Y%m%d-%H%M%S)}
. scripts/gpu_count.sh  # gpu_count
# a whole number from LO to HI (NAME VALUE LO HI [WHY]), printed without leading zeros
whole() {
  case "$2" in
    ''|*[!0-9]*) echo "peer_compare: $1 must be a whole number from $3 to $4, got '$2'" >&2; exit 2;;
  esac
  local v
  v=$(echo "$2" | sed 's/^0*//'); v=${v:-0}
  if [ ${#v} -gt 9 ] || [ "$v" -lt "$3" ] || [ "$v" -gt "$4" ]; then
    echo "peer_compare: $1 must be from $3 to $4${5:+ ($5)}, got $2" >&2; exit 2
  fi
  echo "$v"
}
STEPS=$(whole STEPS "$STEPS" 12 100000 "steps 1-10 are not timed") || exit 2
RECORD_MS=$(whole RECORD_MS "$RECORD_MS" 1 1000000) || exit 2
COUNTS=()
case "$GPUS" in *[![:digit:],]*) echo "peer_compare: GPUS must list GPU counts separated by commas (no spaces), e.g. 1,2,4; got $(printf '%q' "$GPUS")" >&2; exit 2;; esac
IFS=, read -r -a parts <<< "$GPUS,"  # the trailing comma keeps an empty last entry visible
[ "${#parts[@]}" -ge 1 ] && [ -n "$GPUS" ] || { echo "peer_compare: GPUS must list GPU counts, e.g. 1,2,4" >&2; exit 2; }
for n in "${parts[@]}"; do
  n=${n// /}
  n=$(whole GPUS "$n" 1 8 "a GPU count: 1, 2, 4 or 8, comma-separated") || exit 2
  if [ $((8 % n)) -ne 0 ]; then
    echo "peer_compare: GPUS: $n does not divide the batch of 8 sequences; counts that work: 1, 2, 4, 8" >&2; exit 2
  fi
  for m in "${COUNTS[@]}"; do
    [ "$m" != "$n" ] || { echo "peer_compare: GPUS: $n is listed twice" >&2; exit 2; }
  done
  COUNTS+=("$n")
done
case "$DATA" in
  synthetic) TRAIN="data/synthetic/synth_train_*.bin"; VAL="data/synthetic/synth_val_*.bin";;
  gcide) TRAIN="data/gcide/gcide_train_*.bin"; VAL="data/gcide/gcide_val_*.bin";;
  *) echo "peer_compare: DATA must be synthetic or gcide, got '$DATA'" >&2; exit 2;;
esac
[ -e "$LOG_DIR" ] && { echo "peer_compare: $LOG_DIR exists: name a new LOG_DIR" >&2; exit 2; }
most=1
for n in "${COUNTS[@]}"; do [ "$n" -gt "$most" ] && most=$n; done
# everything the runs need, checked before anything is made or built
nvidia-smi -L >/dev/null 2>&1 || { echo "peer_compare: no GPU on this machine (nvidia-smi finds none)" >&2; exit 1; }
visible=$(gpu_count)
[ "$visible" -ge "$most" ] || { echo "peer_compare: GPUS asks for $most GPU(s), $visible visible (nvidia-smi -L, CUDA_VISIBLE_DEVICES)" >&2; exit 2; }
if [ "$most" -gt 1 ]; then
  command -v mpirun >/dev/null || { echo "peer_compare: GPUS asks for $most GPUs: mpirun (for train_gpt) not found" >&2; exit 2; }
fi
if [ "$DATA" = gcide ] && ! compgen -G "$TRAIN" >/dev/null; then
  echo "peer_compare: DATA=gcide: no $TRAIN (make data writes the GCIDE shards)" >&2; exit 2
fi
"$PYTHON_TORCH" -c 'import torch' 2>/dev/null || { echo "peer_compare: PYTHON_TORCH=$PYTHON_TORCH cannot import torch (the peer needs PyTorch)" >&2; exit 2; }
mkdir -p -- "$(dirname -- "$LOG_DIR")" && mkdir -- "$LOG_DIR" || { echo "peer_compare: LOG_DIR $LOG_DIR: cannot make it new (another run's, or its parent is not a folder)" >&2; exit 2; }
if [ "$DATA" = synthetic ] && [ ! -d data/synthetic ]; then python3 scripts/synthetic_shards.py data/synthetic || exit 1; fi
echo "== build ($(date +%T))"
make -j"$(nproc)" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} train_gpt > "$LOG_DIR/build.log" 2>&1 || { tail -20 "$LOG_DIR/build.log"; exit 1; }
export NCCL_NVLS_ENABLE=0  # NVLink multicast off, as for every multi-GPU run of this project
common=(--train-data "$TRAIN" --val-data "$VAL" --steps "$STEPS" --val-every 100000 --val-tokens 65536 --window-blocks 8)
run() {
  local name=$1; shift
  echo "== $name ($(date +%T))"
  "$@" "${common[@]}" --log-file "$LOG_DIR/$name.txt" > "$LOG_DIR/$name.out" 2>&1 || { tail -20 "$LOG_DIR/$name.out"; exit 1; }
}
for n in "${COUNTS[@]}"; do
  if [ "$n" = 1 ]; then
    run train_gpt_1 ./train_gpt --preset speedrun
    run peer "$PYTHON_TORCH" peer/torch_peer.py --numerics record
    run train_gpt_2 ./train_gpt --preset speedrun
  else
    tg=(mpirun --allow-run-as-root -np "$n" -x NCCL_NVLS_ENABLE=0 ./train_gpt --preset speedrun)
    run "train_gpt_1_g$n" "${tg[@]}"
    run "peer_g$n" "$PYTHON_TORCH" -m torch.distributed.run --standalone --nproc_per_node "$n" peer/torch_peer.py --numerics record
    run "train_gpt_2_g$n" "${tg[@]}"
  fi
done
python3 - "$LOG_DIR" "$RECORD_MS" "${COUNTS[@]}" <<'EOF' | tee "$LOG_DIR/summary.txt"
import json, statistics, sys
d, record, counts = sys.argv[1], float(sys.argv[2]), [int(n) for n in sys.argv[3:]]
def read(name):
    ev = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    steps = [e for e in ev if e.get("event") == "step"]
    times = [b["train_time_ms"] - a["train_time_ms"] for a, b in zip(steps, steps[1:]) if b["step"] > 10]
    summ = next(e for e in ev if e.get("event") == "summary")
    start = next(e["startup_s"] for e in ev if e.get("event") == "startup")
    return statistics.median(times), summ["peak_memory_mib"] / 1024, start, len(times)
table = []
for n in counts:
    tail = "" if n == 1 else f"_g{n}"
    names = [f"train_gpt_1{tail}", f"peer{tail}", f"train_gpt_2{tail}"]
    r = {name: read(name) for name in names}
    if len(counts) > 1:
        print(f"{n} GPU{'s' if n > 1 else ''}:")
    w = max(12, *map(len, names))
    print(f"{'run':<{w}} {'median ms':>10} {'steps':>6} {'peak GiB':>9} {'start-up s':>11}")
    for name, (ms, mem, st, k) in r.items():
        print(f"{name:<{w}} {ms:>10.1f} {k:>6} {mem:>9.1f} {st:>11.1f}")
    t1, peer, t2 = (r[name][0] for name in names)
    ours = (t1 + t2) / 2
    print(f"train_gpt / peer: {ours / peer:.3f} (runs 1 and 2: {t1 / peer:.3f}, {t2 / peer:.3f})")
    if n == 1:
        print(f"peer / the record trainer's {record:.0f} ms: {peer / record:.3f}")
    table.append((n, t1, t2, peer, ours / peer))
print()
print(f"{'GPUs':>4} {'train_gpt 1 ms':>15} {'train_gpt 2 ms':>15} {'peer ms':>9} {'ours / peer':>12}")
for n, t1, t2, peer, ratio in table:
    print(f"{n:>4} {t1:>15.1f} {t2:>15.1f} {peer:>9.1f} {ratio:>12.3f}")
EOF
