# The mask ablation as results/mask_ablation/README.md gives it (two H200s, 2026-11-22):
# ablations/mask_ablation.sh runs scripts/ab_run.py into logs/mask/causal (causal on) and
# logs/mask/noncausal (causal off, one pair); logs/mask/noncausal's logs and campaign.json are logs/ here.
# Its campaign.json names the shards by their path in a data folder of the
# machine it ran on, which held the GCIDE shards that make data writes to data/gcide/.
bash ablations/mask_ablation.sh
