# Run on one H200, after the second part of make test-gpu on the same machine, at commit
# e856b09. Each row of the table: bench_attention with its shape and mask flags (those of
# `build/bench/bench_attention --help`: --T, --heads, --head-dim, --causal, --window, --window-mask,
# --window-granularity, --docs), all appending to one JSON file; then compare_flex.py on it
# (FlexAttention compiled with the same mask as a mask_mod, its block mask built outside the timed
# region; cuDNN through SDPA on dense causal). Documents: mean length 1000.
for flags in "${ROWS[@]}"; do  # ROWS: the 14 rows' "FLAGS --name NAME", as the log's table names them
  build/bench/bench_attention ALL.json $flags
done
python3 bench/compare_flex.py ALL.json compare_flex.md
# The backward's choices (the log's fenced block, each row opened by its ATTN_BWD and ATTN_BWD_OWN,
# '-' for none): each case fused, then as two kernels with blocks of 128, and at head dim 64 also
# with blocks of 64.
for c in "${CASES[@]}"; do  # CASES: the block's cases' "FLAGS --name NAME" (d64dense, ..., d128docs)
  ATTN_BWD=fused build/bench/bench_attention BWD.json $c
  ATTN_BWD=two-kernels ATTN_BWD_OWN=128 build/bench/bench_attention BWD.json $c
  case $c in *d64*) ATTN_BWD=two-kernels ATTN_BWD_OWN=64 build/bench/bench_attention BWD.json $c ;; esac
done
# The log, logs/2026-11-25_compare_flex_h200_e856b09.md, is compare_flex.md under a heading naming
# the card, date and commit, with the backward's rows after it. For one shape and mask:
#   bash bench/vs_flex.sh FLAGS
