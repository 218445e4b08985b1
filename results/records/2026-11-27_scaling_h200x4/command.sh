# 4 x H200 of one host, 2026-11-27, commit a9d9a38; C as in results/scaling/README.md
C="--preset speedrun --train-data data/synthetic/synth_train_*.bin --val-data data/synthetic/synth_val_*.bin --val-every 100000 --val-tokens 65536 --window-blocks 8 --steps 30"
./train_gpt $C --log-file logs/new_g1_b.txt
mpirun -np 2 ./train_gpt $C --log-file logs/new_g2_b.txt
mpirun -np 4 ./train_gpt $C --log-file logs/new_g4_b.txt
mpirun -np 4 ./train_gpt $C --grad-sync overlap --log-file logs/new_g4_overlap.txt
mpirun -np 4 ./train_gpt $C --grad-exchange bf16 --log-file logs/new_g4_bf16.txt
