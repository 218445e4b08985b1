# 4 x H100 of one host, 2026-11-28, commit cebc219: 1, 4, 2 and 1 GPU(s), --balance-ranks alternating with the default;
# then the --profile 10 runs in a second group of runs on the same machine
C="--preset speedrun --train-data data/synthetic/synth_train_*.bin --val-data data/synthetic/synth_val_*.bin --val-every 100000 --val-tokens 65536 --window-blocks 8 --steps 30"
./train_gpt $C --log-file logs/g1_a.txt
mpirun -np 4 ./train_gpt $C --log-file logs/g4_end_a.txt      # g4_end_b; with --balance-ranks: g4_bal_a, g4_bal_b
mpirun -np 2 ./train_gpt $C --log-file logs/g2_end_a.txt      # g2_end_b; with --balance-ranks: g2_bal_a, g2_bal_b
./train_gpt $C --log-file logs/g1_b.txt
mpirun -np 2 ./train_gpt $C --profile 10 --log-file logs/p2_end_a.txt   # p2_end_b; --balance-ranks: p2_bal_a, p2_bal_b
mpirun -np 4 ./train_gpt $C --profile 10 --log-file logs/p4_end_a.txt   # --balance-ranks: p4_bal_a
