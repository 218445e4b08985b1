#!/usr/bin/env bash
# Runs the default job (./train_gpt with no flag but its log file: the README's first command) N
# times into a new result record, results/records/DATE_default_job_TAG/: command.sh,
# record.json, logs/run_NN.txt (each run's own log, whose first line names the build's commit)
# and logs/run_NN.err (its standard error: a failure's message), then figures.json written by
# scripts/record_figures.py. A run that fails is kept and counted, and the next one starts.
#   scripts/record_default_job.sh N TAG [TRAINER]      (TAG: the card, e.g. h100; N: 1 to 100)
set -u
usage() { echo "usage: scripts/record_default_job.sh N TAG [TRAINER]  (N: runs, 1 to 100; TAG: letters, digits, '-', e.g. h100)" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || usage
n=$1 tag=$2 trainer=${3:-./train_gpt}
[[ $n =~ ^[0-9]{1,3}$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 100 ] || { echo "record_default_job: N must be 1 to 100, not '$n'" >&2; exit 2; }
[[ $tag =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ ]] || { echo "record_default_job: TAG must be letters, digits and '-', beginning with a letter or digit, not '$tag'" >&2; exit 2; }
[ -e "$trainer" ] || { echo "record_default_job: $trainer: no such trainer (run make first)" >&2; exit 1; }
[ -f "$trainer" ] && [ -x "$trainer" ] || { echo "record_default_job: $trainer: not a file that runs (a trainer binary)" >&2; exit 1; }
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  echo "record_default_job: the tree differs from its commit (git status): commit first; a record names the exact code it ran" >&2; exit 1
fi
git -C "$here" rev-parse --short HEAD > /dev/null 2>&1 || { echo "record_default_job: not a git checkout: a record needs the commit it ran" >&2; exit 1; }
nvidia-smi -L > /dev/null 2>&1 || { echo "record_default_job: no GPU on this machine (nvidia-smi finds none)" >&2; exit 1; }
rec=$here/results/records/$(date -u +%Y-%m-%d)_default_job_$tag
[ -e "$rec" ] && { echo "record_default_job: $rec exists: a record is never edited; give another TAG" >&2; exit 1; }
mkdir -p "$rec/logs" || exit 1
printf '{"kind": "default_job", "question": "what does ./train_gpt (the README'"'"'s first command) give, run %d times on one GPU?"}\n' "$n" > "$rec/record.json"
{ echo "# $n runs of the default job, each with its own log (in this folder)"
  echo "for i in \$(seq -f %02g 1 $n); do $trainer --log-file logs/run_\$i.txt > /dev/null 2> logs/run_\$i.err; done"; } > "$rec/command.sh"
for i in $(seq -f %02g 1 "$n"); do
  "$trainer" --log-file "$rec/logs/run_$i.txt" > /dev/null 2> "$rec/logs/run_$i.err"
  echo "record_default_job: run $i of $n: exit $?"
done
python3 "$here/scripts/record_figures.py" "$rec"
