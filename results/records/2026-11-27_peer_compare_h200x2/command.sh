# Two H200s of one host, 2026-11-27 (results/step_vs_peer/README.md): train_gpt, the peer,
# train_gpt again, on one GPU and then on two; the script's LOG_DIR is logs/ here.
GIT_COMMIT=a5469dd GPUS=1,2 STEPS=20 bash peer/peer_compare.sh
