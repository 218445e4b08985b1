# The prefix-LM ablation, one H200, 2026-11-23 (results/prefix_ablation/README.md); its campaign
# (logs/prefix) is logs/ here.
make -j all && make data
bash ablations/prefix_ablation.sh                 # PREFIX=32 RUNS=5 STEPS=200 CAMPAIGN=logs/prefix
