#!/usr/bin/env bash
# The benchmarks, on any machine with an NVIDIA GPU: builds, then runs the parts asked for and
# prints a short summary last; every log goes to a new folder.
#   attention  build/bench/bench_attention (every mask of its table at the speedrun's shape,
#              6 heads of 128, and at the same width in 12 heads of 64) and,
#              where PyTorch is installed, bench/compare_flex.py on the same GPU right after it:
#              FlexAttention and cuDNN on the same shapes and masks
#   step       the training step at the speedrun's size on one GPU, window fixed at 8 blocks,
#              with --profile (GPU time by category); on a machine with several GPUs, the same
#              on all of them under mpirun
#   default    the default job (300 steps of the default preset)
#   exchange   on a machine with several GPUs (not in the default PARTS): the collectives' bus
#              bandwidth at the exchange's sizes (bench/collective_bandwidth.py under torchrun,
#              where PyTorch is installed), the trainer's own exchange alone against one
#              collective each way (build/bench/exchange_bench under mpirun), then the speedrun
#              step on all of them under each
#              --grad-sync schedule (end, embeddings, overlap), to show which suits this
#              machine's links
#
#   bash bench/gpu_bench.sh                          # every part
#   PARTS="step" STEPS=30 bash bench/gpu_bench.sh    # one part, longer
#   PARTS=exchange STEPS=30 TRAIN_DATA=... VAL_DATA=... bash bench/gpu_bench.sh   # the schedules on this machine
# Variables: PARTS (default "attention step default"), STEPS (20), LOG_DIR (default
# logs/bench-DATE-TIME; must not exist), TRAIN_DATA / VAL_DATA (shard patterns; default the
# GCIDE shards of `make data`), JOBS (make -j, default the core count), GIT_COMMIT (the commit the
# logs name, where the checkout's git metadata cannot tell it).
set -u -o pipefail
cd "$(dirname "$0")/.."
PARTS=${PARTS:-attention step default}
STEPS=${STEPS:-20}
LOG_DIR=${LOG_DIR:-logs/bench-$(date +%Y%m%d-%H%M%S)}
TRAIN_DATA=${TRAIN_DATA:-data/gcide/gcide_train_*.bin}
VAL_DATA=${VAL_DATA:-data/gcide/gcide_val_*.bin}
JOBS=${JOBS:-$(nproc)}
. scripts/env_numbers.sh
. scripts/gpu_count.sh  # gpu_count
need_int gpu_bench STEPS 12 1000000  # steps 1-10 are not timed
need_int gpu_bench JOBS 1 1024
for p in $PARTS; do
  case "$p" in attention|step|default|exchange) ;; *) echo "gpu_bench: unknown part '$p' in PARTS (attention, step, default, exchange)" >&2; exit 2;; esac
done
if [ -e "$LOG_DIR" ]; then echo "gpu_bench: $LOG_DIR exists: name a new LOG_DIR" >&2; exit 2; fi
nvidia-smi -L >/dev/null 2>&1 || { echo "gpu_bench: no GPU on this machine (nvidia-smi finds none)" >&2; exit 1; }
NGPU=$(gpu_count)
[ "$NGPU" -ge 1 ] || { echo "gpu_bench: CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' leaves no GPU visible" >&2; exit 1; }
if [[ " $PARTS " == *" exchange "* ]]; then
  [ "$NGPU" -ge 2 ] || { echo "gpu_bench: PARTS=exchange needs several GPUs; $NGPU visible" >&2; exit 2; }
  [ $((8 % NGPU)) -eq 0 ] || { echo "gpu_bench: PARTS=exchange: $NGPU GPUs do not divide the speedrun's 8 sequences a step (set CUDA_VISIBLE_DEVICES to 2, 4 or 8 of them)" >&2; exit 2; }
  command -v mpirun >/dev/null || { echo "gpu_bench: PARTS=exchange: mpirun not found (apt-get install openmpi-bin)" >&2; exit 2; }
fi
mkdir -p "$LOG_DIR"
export PYTHONUNBUFFERED=1
step() { echo "== $1 ($(date +%T))"; }
set -f  # the shard patterns go to train_gpt as they are

step build
targets="train_gpt build/bench/bench_attention"
[[ " $PARTS " == *" exchange "* ]] && targets+=" build/bench/exchange_bench"
if ! make -j"$JOBS" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} $targets > "$LOG_DIR/build.log" 2>&1; then
  tail -30 "$LOG_DIR/build.log"; exit 1
fi
nvidia-smi -L > "$LOG_DIR/gpu.txt"
if [[ " $PARTS " == *" attention "* ]]; then
  step attention
  build/bench/bench_attention "$LOG_DIR/bench_d128.json" > "$LOG_DIR/bench_attention.txt" 2>&1
  build/bench/bench_attention "$LOG_DIR/bench_d64.json" --heads 12 --head-dim 64 >> "$LOG_DIR/bench_attention.txt" 2>&1
  cat "$LOG_DIR/bench_d128.json" "$LOG_DIR/bench_d64.json" > "$LOG_DIR/bench_attention.json"
  if python3 -c 'import torch' 2>/dev/null; then
    step flex
    timeout 900 python3 bench/compare_flex.py "$LOG_DIR/bench_attention.json" "$LOG_DIR/compare_flex.md" > "$LOG_DIR/compare_flex.log" 2>&1
  fi
fi
SR=(--preset speedrun --train-data "$TRAIN_DATA" --val-data "$VAL_DATA" --steps "$STEPS" --val-every 100000 --val-tokens 65536
    --window-blocks 8)
if [[ " $PARTS " == *" step "* ]]; then
  step "speedrun step, 1 GPU"
  ./train_gpt "${SR[@]}" --profile 10 --log-file "$LOG_DIR/speedrun_g1.txt" > "$LOG_DIR/speedrun_g1.out" 2>&1
  if [ "$NGPU" -ge 2 ] && command -v mpirun >/dev/null; then
    step "speedrun step, $NGPU GPUs"
    mpirun --allow-run-as-root -np "$NGPU" -x NCCL_NVLS_ENABLE=0 ./train_gpt "${SR[@]}" --profile 10 --log-file "$LOG_DIR/speedrun_g$NGPU.txt" \
      > "$LOG_DIR/speedrun_g$NGPU.out" 2>&1
  fi
fi
if [[ " $PARTS " == *" exchange "* ]]; then
  if python3 -c 'import torch' 2>/dev/null; then
    step "collective bandwidth, $NGPU GPUs"
    NCCL_NVLS_ENABLE=0 timeout 600 python3 -m torch.distributed.run --standalone --nproc_per_node "$NGPU" bench/collective_bandwidth.py \
      --json "$LOG_DIR/collective_bandwidth.json" > "$LOG_DIR/collective_bandwidth.txt" 2>&1
  fi
  step "the exchange alone, $NGPU GPUs"
  timeout 600 mpirun --allow-run-as-root -np "$NGPU" -x NCCL_NVLS_ENABLE=0 build/bench/exchange_bench > "$LOG_DIR/exchange_bench.txt" 2>&1 \
    || echo "gpu_bench: exchange_bench failed (exit $?); its output is above" >> "$LOG_DIR/exchange_bench.txt"
  for sync in end embeddings overlap; do
    step "speedrun step, $NGPU GPUs, --grad-sync $sync"
    mpirun --allow-run-as-root -np "$NGPU" -x NCCL_NVLS_ENABLE=0 ./train_gpt "${SR[@]}" --grad-sync "$sync" \
      --log-file "$LOG_DIR/exchange_$sync.txt" > "$LOG_DIR/exchange_$sync.out" 2>&1
  done
fi
if [[ " $PARTS " == *" default "* ]]; then
  step "default job"
  ./train_gpt --train-data "$TRAIN_DATA" --val-data "$VAL_DATA" --log-file "$LOG_DIR/default.txt" > "$LOG_DIR/default.out" 2>&1
fi

set +f
echo "== summary ($LOG_DIR)"
cat "$LOG_DIR/gpu.txt"
[ -f "$LOG_DIR/bench_attention.txt" ] && cat "$LOG_DIR/bench_attention.txt"
[ -f "$LOG_DIR/compare_flex.log" ] && tail -34 "$LOG_DIR/compare_flex.log"
[ -f "$LOG_DIR/collective_bandwidth.txt" ] && tail -8 "$LOG_DIR/collective_bandwidth.txt"
[ -f "$LOG_DIR/exchange_bench.txt" ] && tail -6 "$LOG_DIR/exchange_bench.txt"
for f in "$LOG_DIR"/speedrun_g*.out "$LOG_DIR"/exchange_*.out "$LOG_DIR"/default.out; do
  [ -f "$f" ] || continue
  echo "-- $(basename "$f" .out)"
  grep -E "train_gpt: [0-9]+ timed steps|val_loss|peak GPU memory|exchange|optimiser|error" "$f" | tail -6
done
[ -f "$LOG_DIR/speedrun_g1.out" ] && sed -n '/profile:/,/total/p' "$LOG_DIR/speedrun_g1.out"
exit 0
