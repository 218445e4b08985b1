# Four H100s of one host, 2026-11-28 (results/speedrun_end_to_end/README.md): each trainer's whole
# speedrun, one after the other into one folder (logs/full there, logs/ here), then the table.
GIT_COMMIT=a2b726e2d0858ba0bb5a90974c4dbe2648820b53 GPUS=4 RUNS=train_gpt LOG_DIR=logs/full bash peer/peer_full_run.sh
GIT_COMMIT=a2b726e2d0858ba0bb5a90974c4dbe2648820b53 GPUS=4 RUNS=peer LOG_DIR=logs/full bash peer/peer_full_run.sh
