# 20 runs of the default job, each with its own log (in this folder)
for i in $(seq -f %02g 1 20); do ./train_gpt --log-file logs/run_$i.txt > /dev/null 2> logs/run_$i.err; done
