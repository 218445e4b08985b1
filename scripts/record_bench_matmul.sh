#!/usr/bin/env bash
# Runs bench_matmul builds in turn, R rounds (each round every build once, in the order given,
# so that a drift of the card's clocks falls on all of them alike), into a new result record,
# results/records/DATE_bench_matmul_TAG/: command.sh, record.json, logs/LABEL_REP.txt (a run's
# standard output, whose first line names its build's commit and source digest) and
# logs/LABEL_REP.err (its standard error), then figures.json written by
# scripts/record_figures.py. An existing record is never touched: a TAG already used is refused.
# A build whose log is not stamped with a clean commit stops the record at once (its figures
# would be refused).
#   scripts/record_bench_matmul.sh R TAG LABEL=BINARY [LABEL=BINARY ...] [-- FLAG ...]
#   e.g. scripts/record_bench_matmul.sh 5 h100-mlp old=/tmp/old/bench_matmul new=build/bench/bench_matmul -- --mlp-only
# (R: 1 to 100; TAG and LABEL: letters, digits, '-', and '.' or '+' in a LABEL; FLAGs go to every run)
set -u
usage() { echo "usage: scripts/record_bench_matmul.sh R TAG LABEL=BINARY [LABEL=BINARY ...] [-- FLAG ...]  (R: 1 to 100; TAG: letters, digits, '-')" >&2; exit 2; }
[ $# -ge 3 ] || usage
r=$1 tag=$2
shift 2
[[ $r =~ ^[0-9]{1,3}$ ]] && [ "$r" -ge 1 ] && [ "$r" -le 100 ] || { echo "record_bench_matmul: R must be 1 to 100, not '$r'" >&2; exit 2; }
[[ $tag =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ ]] || { echo "record_bench_matmul: TAG must be letters, digits and '-', beginning with a letter or digit, not '$tag'" >&2; exit 2; }
labels=() bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  [[ $1 =~ ^([A-Za-z0-9.+-]+)=(.+)$ ]] || { echo "record_bench_matmul: '$1' is not LABEL=BINARY (LABEL: letters, digits, '.', '+', '-')" >&2; exit 2; }
  for l in "${labels[@]}"; do
    [ "$l" = "${BASH_REMATCH[1]}" ] && { echo "record_bench_matmul: label '$l' given twice" >&2; exit 2; }
  done
  [ -x "${BASH_REMATCH[2]}" ] && [ -f "${BASH_REMATCH[2]}" ] || { echo "record_bench_matmul: ${BASH_REMATCH[2]}: no such binary (build it: make build/bench/bench_matmul)" >&2; exit 1; }
  labels+=("${BASH_REMATCH[1]}") bins+=("${BASH_REMATCH[2]}")
  shift
done
[ ${#labels[@]} -ge 1 ] || usage
[ $# -gt 0 ] && shift  # the "--"
flags=("$@")
here=$(cd "$(dirname "$0")/.." && pwd)
rec=$here/results/records/$(date -u +%Y-%m-%d)_bench_matmul_$tag
[ -e "$rec" ] && { echo "record_bench_matmul: $rec exists: a record is never edited; give another TAG" >&2; exit 1; }
mkdir -p "$rec/logs" || exit 1
flagtext=""
[ ${#flags[@]} -gt 0 ] && flagtext=$(printf ' %q' "${flags[@]}")  # (printf with no argument would print one '')
python3 -c 'import json, sys; open(sys.argv[2], "w").write(json.dumps({"kind": "bench_matmul", "question": sys.argv[1]}) + "\n")' \
  "how long does each fused product take against its parts apart (bench_matmul$flagtext), on builds ${labels[*]}, in $r rounds on one GPU?" \
  "$rec/record.json" || exit 1
{ echo "# $r rounds, each running every build once in turn (in this folder)"
  echo "for i in \$(seq 1 $r); do"
  for k in "${!labels[@]}"; do
    echo "  $(printf '%q' "${bins[$k]}")$flagtext > logs/${labels[$k]}_\$i.txt 2> logs/${labels[$k]}_\$i.err"
  done
  echo "done"; } > "$rec/command.sh"
for i in $(seq 1 "$r"); do
  for k in "${!labels[@]}"; do
    log=$rec/logs/${labels[$k]}_$i.txt
    "${bins[$k]}" "${flags[@]}" > "$log" 2> "${log%.txt}.err"
    echo "record_bench_matmul: round $i of $r, ${labels[$k]}: exit $?"
    if ! head -n 1 "$log" | grep -Eq '^bench_matmul [0-9a-f]{7,40} source:[0-9a-f]{64}$'; then
      echo "record_bench_matmul: $log: its first line is not 'bench_matmul COMMIT source:DIGEST' with a clean commit" \
           "(a build from before the stamp, or from tracked files that differed from their commit): stopped; remove $rec" >&2
      exit 1
    fi
  done
done
python3 "$here/scripts/record_figures.py" "$rec"
