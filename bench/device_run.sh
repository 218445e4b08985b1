#!/usr/bin/env bash
# One call on the GPU machine (the device tool): build, GPU tests, attn_run check, attention
# benchmark, tiktoken fixture, then the FlexAttention / cuDNN comparison (slowest: torch.compile
# per mask) under its own time limit. Full logs go to $OUT; a short summary is printed last.
#   carry: .devdata (GPT-2 vocab files and tokenizer inputs, see scripts/make_tiktoken_fixture.py)
set -u -o pipefail
OUT=${OUT:-/tmp/device_out}
LOG=/tmp/device_logs
mkdir -p "$OUT" "$LOG"
export PYTHONUNBUFFERED=1
step() { echo "== $1 ($(date +%T))"; }
step gpu; nvidia-smi -L | tee "$LOG/gpu.txt"
step build
if ! (time make -j16 build/tests/test_attention_gpu build/bench/bench_attention attention/attn_run) > "$LOG/build.log" 2>&1; then
  tail -40 "$LOG/build.log"; exit 1
fi
tail -3 "$LOG/build.log"
make -j16 train_gpt > "$LOG/build_train_gpt.log" 2>&1 && echo "train_gpt built" || { echo "train_gpt build FAILED"; tail -5 "$LOG/build_train_gpt.log"; }
step test-gpu
timeout 300 build/tests/test_attention_gpu ${TEST_ARGS:-} > "$LOG/test_gpu.log" 2>&1; echo "exit $?" >> "$LOG/test_gpu.log"
cp attention_errors.txt "$LOG/" 2>/dev/null
step attn-run
timeout 120 python3 tests/test_attn_run.py attention/attn_run > "$LOG/attn_run.log" 2>&1
step bench
timeout 180 build/bench/bench_attention "$LOG/bench_attention.json" > "$LOG/bench.log" 2>&1
step bench-sm80
[ -z "${SKIP_SM80:-}" ] && ATTN_KERNELS=sm80 timeout 180 build/bench/bench_attention /tmp/sm80.json > "$LOG/bench_sm80.log" 2>&1
step tiktoken
[ -d .devdata ] && timeout 60 python3 scripts/make_tiktoken_fixture.py ids .devdata/gpt2 .devdata/tok_inputs.json > "$LOG/tiktoken_gpt2.json" 2> "$LOG/tiktoken.err"
step flex
[ -z "${SKIP_FLEX:-}" ] && timeout "${FLEX_TIMEOUT:-300}" python3 bench/compare_flex.py "$LOG/bench_attention.json" "$LOG/compare.md" > "$LOG/compare.log" 2>&1
if [ -n "${PROFILE:-}" ] && command -v ncu >/dev/null; then
  step profile
  for k in ${PROFILE_KERNELS:-attention_fwd_sm90_kernel attention_bwd_dq_sm90_kernel attention_bwd_dkdv_sm90_kernel}; do
    BENCH_ONLY="causal + window 1024" timeout 120 ncu --clock-control none -k "regex:$k" --launch-skip 5 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section LaunchStats build/bench/bench_attention /tmp/ncu_bench.json > "$LOG/ncu_$k.txt" 2>&1
  done
fi
cp "$LOG"/bench_attention.json "$LOG"/compare.md "$LOG"/tiktoken_gpt2.json "$OUT"/ 2>/dev/null
tar -C "$LOG" -czf "$OUT/logs.tgz" .
echo "== summary"
grep -E "FAIL|passed|sampled|exit" "$LOG/test_gpu.log" | tail -25
tail -3 "$LOG/attn_run.log"
cat "$LOG/bench.log"
echo "-- the sm80 (mma.sync) kernels, ATTN_KERNELS=sm80:"; cat "$LOG/bench_sm80.log" 2>/dev/null
tail -16 "$LOG/compare.log"
