# Four H100s of one host, 2026-11-28 (results/step_vs_peer/README.md): train_gpt, the peer,
# train_gpt again, on one GPU, then on two, then on four; the script's LOG_DIR is logs/ here.
GIT_COMMIT=cebc219 GPUS=1,2,4 STEPS=20 bash peer/peer_compare.sh
