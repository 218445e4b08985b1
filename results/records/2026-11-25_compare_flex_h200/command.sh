# Run in one call on one H200, after the second part of make test-gpu on the same machine, at commit
# e856b09. Each row of the table: bench_attention with its shape and mask flags (those of
# `build/bench/bench_attention --help`: --T, --heads, --head-dim, --causal, --window, --window-mask,
# --window-granularity, --docs), all appending to one JSON file; then compare_flex.py on it
# (FlexAttention compiled with the same mask as a mask_mod, its block mask built outside the timed
# region; cuDNN through SDPA on dense causal). Documents: mean length 1000.
for flags in "${ROWS[@]}"; do  # ROWS: the 14 rows' "FLAGS --name NAME", as the log's table names them
  build/bench/bench_attention ALL.json $flags
done
python3 bench/compare_flex.py ALL.json compare_flex.md
# The backward's choices, at head dim 64 and 128 (the log's fenced block, each row opened by its
# ATTN_BWD and ATTN_BWD_OWN, '-' for none):
for bwd in fused two-kernels; do
  for own in 128 64; do
    ATTN_BWD=$bwd ATTN_BWD_OWN=$own build/bench/bench_attention BWD.json FLAGS --name NAME
  done
done
# The log, logs/2026-11-25_compare_flex_h200_e856b09.md, is compare_flex.md under a heading naming
# the card, date and commit, with the backward's rows after it. For one shape and mask:
#   bash bench/vs_flex.sh FLAGS
