# train_gpt against its PyTorch peer, 150 steps, three seeds each, one H200, 2026-11-23
# (results/learning_gap/README.md); runs shared the GPU, so no time is a speed figure. Its logs
# (logs/learn150) are logs/ here.
make data && make
LOG_DIR=logs/learn150 bash ablations/learning_compare.sh                        # 150 steps, seeds 0-2
