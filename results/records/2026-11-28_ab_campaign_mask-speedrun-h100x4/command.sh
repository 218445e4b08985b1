# The mask ablation at the speedrun size on 2 and 4 GPUs, 4 x H100 of one host, 2026-11-28
# (results/mask_ablation/README.md); its campaign (logs/mask_speedrun_multi/causal) is logs/ here.
PRESET=speedrun STEPS=20 VAL_EVERY=10 VAL_TOKENS=655360 GPUS=2,4 RUNS=1 NONCAUSAL=0 CAMPAIGN=logs/mask_speedrun_multi \
    bash ablations/mask_ablation.sh
