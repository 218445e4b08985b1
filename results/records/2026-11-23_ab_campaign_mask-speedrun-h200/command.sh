# The mask ablation at the speedrun size, one H200, 2026-11-23 (results/mask_ablation/README.md);
# its campaign (logs/mask_speedrun/causal) is logs/ here.
PRESET=speedrun STEPS=20 VAL_EVERY=10 VAL_TOKENS=655360 GPUS=1 NONCAUSAL=0 CAMPAIGN=logs/mask_speedrun \
    bash ablations/mask_ablation.sh
