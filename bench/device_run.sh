#!/usr/bin/env bash
# One call on the GPU machine (the device tool): build, GPU tests, attn_run check, attention
# benchmark, tiktoken fixture, then the FlexAttention / cuDNN comparison (slowest: torch.compile
# per mask) under its own time limit. Full logs go to $OUT; a short summary is printed last.
#   carry: .devdata (GPT-2 vocab files and tokenizer inputs, see scripts/make_tiktoken_fixture.py)
set -u -o pipefail
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
step() { echo "== $1 ($(date +%T))"; }
step gpu; nvidia-smi -L | tee "$OUT/gpu.txt"
step build
if ! (time make -j16 build/tests/test_attention_gpu build/bench/bench_attention attention/attn_run) > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; exit 1
fi
tail -3 "$OUT/build.log"
make -j16 train_gpt > "$OUT/build_train_gpt.log" 2>&1 && echo "train_gpt built" || { echo "train_gpt build FAILED"; tail -5 "$OUT/build_train_gpt.log"; }
step test-gpu
timeout 300 build/tests/test_attention_gpu > "$OUT/test_gpu.log" 2>&1; echo "exit $?" >> "$OUT/test_gpu.log"
cp attention_errors.txt "$OUT/" 2>/dev/null
step attn-run
timeout 120 python3 tests/test_attn_run.py attention/attn_run > "$OUT/attn_run.log" 2>&1
step bench
timeout 180 build/bench/bench_attention "$OUT/bench_attention.json" > "$OUT/bench.log" 2>&1
step tiktoken
[ -d .devdata ] && timeout 60 python3 scripts/make_tiktoken_fixture.py ids .devdata/gpt2 .devdata/tok_inputs.json > "$OUT/tiktoken_gpt2.json" 2> "$OUT/tiktoken.err"
step flex
timeout "${FLEX_TIMEOUT:-300}" python3 bench/compare_flex.py "$OUT/bench_attention.json" "$OUT/compare.md" > "$OUT/compare.log" 2>&1
if [ -n "${PROFILE:-}" ] && command -v ncu >/dev/null; then
  step profile
  for k in attention_fwd_kernel attention_bwd_dq_kernel attention_bwd_dkdv_kernel; do
    timeout 120 ncu --clock-control none -k "regex:$k" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section LaunchStats build/bench/bench_attention /tmp/ncu_bench.json > "$OUT/ncu_$k.txt" 2>&1
  done
fi
tar -C "$OUT" -czf "$OUT/logs.tgz" --exclude logs.tgz --exclude '*.json' --exclude compare.md . 2>/dev/null
echo "== summary"
grep -E "FAIL|passed|sampled|exit" "$OUT/test_gpu.log" | tail -25
tail -3 "$OUT/attn_run.log"
cat "$OUT/bench.log"
tail -16 "$OUT/compare.log"
