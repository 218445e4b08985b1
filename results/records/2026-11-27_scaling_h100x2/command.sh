# 2 x H100 of one host (NV18), 2026-11-27, commit 96d77ce (results/grad_sync/README.md's H100 pair); in the order
# g1_end, g1_emb, g2_end, g2_emb, then back (g2_emb_b, g2_end_b, g1_emb_b, g1_end_b); the first of each with --profile 10
C="--preset speedrun --train-data data/synthetic/synth_train_*.bin --val-data data/synthetic/synth_val_*.bin --val-every 100000 --val-tokens 65536 --window-blocks 8"
export NCCL_NVLS_ENABLE=0
./train_gpt $C --steps 30 --profile 10 --log-file logs/g1_end.txt                                # g1_end_b without --profile
./train_gpt $C --steps 30 --profile 10 --grad-sync embeddings --log-file logs/g1_emb.txt         # g1_emb_b
mpirun -np 2 ./train_gpt $C --steps 30 --profile 10 --log-file logs/g2_end.txt                   # g2_end_b
mpirun -np 2 ./train_gpt $C --steps 30 --profile 10 --grad-sync embeddings --log-file logs/g2_emb.txt   # g2_emb_b
