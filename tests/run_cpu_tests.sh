#!/usr/bin/env bash
# Runs every test that needs no GPU and prints the total as 'tests: N passed, N failed'.
# Each suite prints its own 'SUITE: N passed, N failed' line, which is summed here; a suite that
# crashes without printing one counts as one failure.
set -u
BUILD=${BUILD:-build}
# a python3 with the tests' modules (another python3 may come first on PATH: pyenv, conda, a venv)
PYTHON=${PYTHON:-$(for p in python3 /usr/bin/python3; do "$p" -c 'import numpy, scipy, statsmodels' 2>/dev/null && echo "$p" && break; done)}
PYTHON=${PYTHON:-python3}
VOCAB_DIR=${VOCAB_DIR:-data/gpt2}
GCIDE_DIR=${GCIDE_DIR:-/usr/share/dictd}
passed=0
failed=0
run() {
  local name=$1; shift
  echo "== $name"
  local out rc
  out=$("$@" 2>&1); rc=$?
  echo "$out" | grep -v '^ok ' | tail -n 40
  local line
  line=$(echo "$out" | grep -E '^[A-Za-z0-9_-]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  if [ -z "$line" ]; then
    echo "   (no result line; exit code $rc): counted as 1 failure"
    failed=$((failed + 1))
    return
  fi
  local p f
  p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
}
run shards "$BUILD/tests/test_data"
run attention-cpu "$BUILD/tests/test_attention_cpu"
run model-cpu "$BUILD/tests/test_model_cpu"
run target-leak "$BUILD/tests/test_target_leak"
run optimizer-cpu "$BUILD/tests/test_optimizer_cpu"
run fp8 "$BUILD/tests/test_fp8"
run checkpoint "$BUILD/tests/test_checkpoint"
run ready-point "$BUILD/tests/test_ready_point"
run exchange-windows "$BUILD/tests/test_exchange_windows"
run shard-plan "$BUILD/tests/test_shard_plan"
run hand-out "$BUILD/tests/test_hand_out"
run dist-1 "$BUILD/tests/test_dist"
if command -v mpirun >/dev/null; then  # three processes on this machine, as root too
  run dist-3 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    mpirun -np 3 "$BUILD/tests/test_dist"
fi
run loader-log env PYTHON="$PYTHON" "$BUILD/tests/test_loader_log"
run bos-loader "$BUILD/tests/test_bos_loader"
run recipes "$BUILD/tests/test_recipes"
run tokenizer "$PYTHON" tests/test_tokenizer.py "$BUILD" "$VOCAB_DIR" "$GCIDE_DIR"
run cli "$PYTHON" tests/test_cli.py "$BUILD" "$VOCAB_DIR"
run recipes-cli "$PYTHON" tests/test_recipes.py ./train_gpt
run fetch "$PYTHON" tests/test_fetch_fineweb.py
run ablation-tools "$PYTHON" tests/test_ablation_tools.py
run record-check "$PYTHON" tests/test_record_check.py
run removals "$PYTHON" tests/test_removals.py
run schedule-model "$PYTHON" tests/test_schedule_model.py
run rank-balance "$PYTHON" tests/test_rank_balance.py
run torch-peer "$PYTHON" tests/test_torch_peer.py ./train_gpt
run peer-full-run "$PYTHON" tests/test_peer_full_run.py
run record-trainer "$PYTHON" tests/test_record_trainer.py
run standalone "$PYTHON" tests/test_standalone.py
run layout "$PYTHON" tests/test_layout.py
run layering "$PYTHON" tests/test_layering.py
run source-digest "$PYTHON" tests/test_source_digest.py
run records "$PYTHON" tests/test_records.py
run record-compare-flex "$PYTHON" tests/test_record_compare_flex.py
run record-peer "$PYTHON" tests/test_record_peer.py
run record-scaling "$PYTHON" tests/test_record_scaling.py
run record-ab-campaign "$PYTHON" tests/test_record_ab_campaign.py
run record-scripts "$PYTHON" tests/test_record_scripts.py
run page-figures "$PYTHON" tests/test_page_figures.py
run log-commits "$PYTHON" tests/test_log_commits.py
run records-frozen "$PYTHON" tests/test_records_frozen.py
run gemm-ring-model "$PYTHON" tests/test_gemm_ring_model.py
run hostile "$PYTHON" tests/test_hostile.py "$BUILD"
run hostile-ab "$PYTHON" tests/test_hostile_ab.py
run hostile-numbers "$PYTHON" tests/test_hostile_numbers.py
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
