#!/usr/bin/env bash
# One call on the 2-GPU machine (device tool, nvidia-h200-x2): build, the model/layer GPU tests,
# the whole-run training tests (1 and 2 GPUs, faults), then the speedrun-size step benchmark on
# 1 and 2 GPUs (overlapped and end-of-backward gradient all-reduce) with the per-category profile.
#   carry: .devdata (GCIDE shards in .devdata/gcide, GPT-2 files)
# Full logs go to $OUT/logs.tgz; a summary is printed last. SKIP_TESTS=1 runs the benchmark only;
# TRAINING_TESTS_ONLY=1 skips the kernel tests; SKIP_TORCH=1 the PyTorch model check; ABLATION=1
# then runs bench/mask_ablation.sh in the time left (DEADLINE seconds from the start, 575).
set -u -o pipefail
OUT=${OUT:-/tmp/device_out}
LOG=/tmp/device_logs
mkdir -p "$OUT" "$LOG"
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TR='.devdata/gcide/gcide_train_*.bin'
VA='.devdata/gcide/gcide_val_*.bin'
set -f  # the patterns go to train_gpt as they are
step() { echo "== $1 ($(date +%T))"; }
finish() { tar -C "$LOG" -czf "$OUT/logs.tgz" .; }
trap finish EXIT
step env
nvidia-smi -L | tee "$LOG/gpu.txt"
{ command -v mpicxx mpirun; mpirun --version | head -1; nvcc --version | tail -1; } 2>&1 | tee "$LOG/env.txt"
step build
if ! (time make -j32 train_gpt build/tests/test_layers_gpu build/tests/test_model_gpu build/model_dump) > "$LOG/build.log" 2>&1; then
  tail -30 "$LOG/build.log"; exit 1
fi
grep -q "USE_MPI" "$LOG/build.log" && echo "built with MPI" || echo "WARNING: built without MPI"
if [ -n "${TRAINING_TESTS_ONLY:-}" ]; then
  step test-training; timeout 300 python3 tests/test_training_gpu.py "$TR" "$VA" ./train_gpt > "$LOG/test_training.log" 2>&1
  tail -1 "$LOG/test_training.log"
elif [ -z "${SKIP_TESTS:-}" ]; then
  step test-layers; timeout 120 build/tests/test_layers_gpu > "$LOG/test_layers.log" 2>&1; tail -1 "$LOG/test_layers.log"
  step test-model; timeout 120 build/tests/test_model_gpu > "$LOG/test_model.log" 2>&1; tail -1 "$LOG/test_model.log"
  if [ -z "${SKIP_TORCH:-}" ]; then
    step test-torch; timeout 120 python3 tests/torch_model_check.py build > "$LOG/test_torch.log" 2>&1; tail -1 "$LOG/test_torch.log"
  fi
  step test-training; timeout 330 python3 tests/test_training_gpu.py "$TR" "$VA" ./train_gpt > "$LOG/test_training.log" 2>&1
  tail -1 "$LOG/test_training.log"
fi
SR="--preset speedrun --train-data $TR --val-data $VA --steps ${BENCH_STEPS:-20} --val-every 1000 --val-tokens 65536 --window-blocks 8"
step bench-1gpu
timeout 150 ./train_gpt $SR --profile 10 --log-file "$LOG/speedrun_g1.txt" > "$LOG/bench_g1.log" 2>&1
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
step bench-2gpu-overlap
timeout 100 mpirun -np 2 ./train_gpt $SR --profile 10 --log-file "$LOG/speedrun_g2.txt" > "$LOG/bench_g2.log" 2>&1
[ -n "${SKIP_END:-}" ] || step bench-2gpu-end
[ -n "${SKIP_END:-}" ] || timeout 100 mpirun -np 2 ./train_gpt $SR --grad-sync end --log-file "$LOG/speedrun_g2_end.txt" > "$LOG/bench_g2_end.log" 2>&1
fi
if [ -n "${ABLATION:-}" ]; then  # the mask campaign (bench/mask_ablation.sh) in the time left, if the kernels passed
  if grep -q "layers-gpu: [0-9]* passed, 0 failed" "$LOG/test_layers.log" && grep -q "model-gpu: [0-9]* passed, 0 failed" "$LOG/test_model.log"; then
    step ablation
    TRAIN="$TR" VAL="$VA" timeout $((${DEADLINE:-575} - SECONDS)) bash bench/mask_ablation.sh > "$LOG/ablation.log" 2>&1
    echo "ablation exit $?"; tar -czf "$OUT/ablation.tgz" logs/mask
  else
    echo "ablation skipped: a kernel test failed"
  fi
fi
echo "== summary"
grep -h -E "FAIL|passed" "$LOG"/test_*.log 2>/dev/null | tail -30
grep -h -E "^  1 vs 2|^  [a-z_0-9]+: exit" "$LOG/test_training.log" 2>/dev/null | tail -40
for f in bench_g1 bench_g2 bench_g2_end; do [ -f "$LOG/$f.log" ] || continue; echo "-- $f"; grep -E "train_gpt:|error|step:20/" "$LOG/$f.log" | tail -8; done
echo "-- profile (1 GPU)"; sed -n '/profile:/,/total/p' "$LOG/bench_g1.log"
if [ -f "$LOG/bench_g2.log" ]; then echo "-- profile (2 GPUs, rank 0)"; sed -n '/profile:/,/total/p' "$LOG/bench_g2.log"; fi
