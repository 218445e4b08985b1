#!/usr/bin/env bash
# The speedrun step of train_gpt against its PyTorch peer (peer/torch_peer.py: torch.compile,
# FlexAttention, the record's numerics) on the same GPU in one run: train_gpt, the peer, then
# train_gpt again, so that a drift of the machine shows. Each runs the speedrun preset with the
# window fixed at 8 blocks for STEPS steps; the figure is the median of the timed steps (11 on,
# validation excluded, from the JSON logs' full-precision times).
#   bash peer/peer_compare.sh
# Variables: STEPS (30), DATA (synthetic: FineWeb-like shards of scripts/synthetic_shards.py, made
# in data/synthetic on first use; or gcide: the shards of `make data`), LOG_DIR (new; default
# logs/peer-DATE-TIME), PYTHON_TORCH (a python3 with PyTorch; default python3), RECORD_MS (1102:
# the 2024-12-10 record trainer's step on one H200 on the synthetic shards, for the peer's ratio).
set -u -o pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-30}; DATA=${DATA:-synthetic}; PYTHON_TORCH=${PYTHON_TORCH:-python3}; RECORD_MS=${RECORD_MS:-1102}
LOG_DIR=${LOG_DIR:-logs/peer-$(date +%Y%m%d-%H%M%S)}
. scripts/env_numbers.sh
need_int peer_compare STEPS 12 1000000  # steps 1-10 are not timed
need_int peer_compare RECORD_MS 1 10000000
case "$DATA" in
  synthetic) TRAIN="data/synthetic/synth_train_*.bin"; VAL="data/synthetic/synth_val_*.bin";;
  gcide) TRAIN="data/gcide/gcide_train_*.bin"; VAL="data/gcide/gcide_val_*.bin";;
  *) echo "peer_compare: DATA must be synthetic or gcide, got '$DATA'" >&2; exit 2;;
esac
[ -e "$LOG_DIR" ] && { echo "peer_compare: $LOG_DIR exists: name a new LOG_DIR" >&2; exit 2; }
if [ "$DATA" = synthetic ] && [ ! -d data/synthetic ]; then python3 scripts/synthetic_shards.py data/synthetic || exit 1; fi
mkdir -p "$LOG_DIR"
echo "== build ($(date +%T))"
make -j"$(nproc)" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} train_gpt > "$LOG_DIR/build.log" 2>&1 || { tail -20 "$LOG_DIR/build.log"; exit 1; }
common=(--train-data "$TRAIN" --val-data "$VAL" --steps "$STEPS" --val-every 100000 --val-tokens 65536 --window-blocks 8)
run() {
  local name=$1; shift
  echo "== $name ($(date +%T))"
  "$@" "${common[@]}" --log-file "$LOG_DIR/$name.txt" > "$LOG_DIR/$name.out" 2>&1 || { tail -20 "$LOG_DIR/$name.out"; exit 1; }
}
run train_gpt_1 ./train_gpt --preset speedrun
run peer "$PYTHON_TORCH" peer/torch_peer.py --numerics record
run train_gpt_2 ./train_gpt --preset speedrun
python3 - "$LOG_DIR" "$RECORD_MS" <<'EOF' | tee "$LOG_DIR/summary.txt"
import json, statistics, sys
d, record = sys.argv[1], float(sys.argv[2])
def read(name):
    ev = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    steps = [e for e in ev if e.get("event") == "step"]
    times = [b["train_time_ms"] - a["train_time_ms"] for a, b in zip(steps, steps[1:]) if b["step"] > 10]
    summ = next(e for e in ev if e.get("event") == "summary")
    start = next(e["startup_s"] for e in ev if e.get("event") == "startup")
    return statistics.median(times), summ["peak_memory_mib"] / 1024, start, len(times)
r = {n: read(n) for n in ("train_gpt_1", "peer", "train_gpt_2")}
print(f"{'run':<12} {'median ms':>10} {'steps':>6} {'peak GiB':>9} {'start-up s':>11}")
for n, (ms, mem, st, k) in r.items():
    print(f"{n:<12} {ms:>10.1f} {k:>6} {mem:>9.1f} {st:>11.1f}")
ours = (r["train_gpt_1"][0] + r["train_gpt_2"][0]) / 2
print(f"train_gpt / peer: {ours / r['peer'][0]:.3f} (runs 1 and 2: {r['train_gpt_1'][0] / r['peer'][0]:.3f}, {r['train_gpt_2'][0] / r['peer'][0]:.3f})")
print(f"peer / the record trainer's {record:.0f} ms: {r['peer'][0] / record:.3f}")
EOF
