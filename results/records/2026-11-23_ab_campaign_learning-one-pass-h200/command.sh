# train_gpt against its PyTorch peer in both numerics, 30 steps, three seeds each, one H200,
# 2026-11-23 (results/learning_gap/README.md); runs shared the GPU, so no time is a speed figure.
# Its logs (logs/learn30) are logs/ here.
make data && make
LOG_DIR=logs/learn30 STEPS=30 VAL_EVERY=5 VARIANTS="train_gpt peer peer_fp32" bash ablations/learning_compare.sh
