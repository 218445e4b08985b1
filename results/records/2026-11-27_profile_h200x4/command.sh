# 4 x H200 of one host, 2026-11-27, commit a9d9a38
C="--preset speedrun --train-data data/synthetic/synth_train_*.bin --val-data data/synthetic/synth_val_*.bin --val-every 100000 --val-tokens 65536 --window-blocks 8 --steps 30"
./train_gpt $C --profile 10 --log-file logs/new_g1.txt
mpirun -np 2 ./train_gpt $C --profile 10 --log-file logs/new_g2.txt
mpirun -np 4 ./train_gpt $C --profile 10 --log-file logs/new_g4.txt
