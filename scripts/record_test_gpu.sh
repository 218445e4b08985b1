#!/usr/bin/env bash
# Runs make test-gpu's suites, P at a time on this machine's GPU, into a new result record,
# results/records/DATE_test_gpu_TAG/: command.sh, record.json, logs/build.txt (the build),
# logs/commit.txt, logs/gpu.txt (nvidia-smi's name of the card and its driver), and each suite's
# output and exit code (logs/SUITE.txt, logs/SUITE.rc), then figures.json written by
# scripts/record_figures.py. A suite that fails is kept and counted; the script exits 1 then.
#   scripts/record_test_gpu.sh TAG [P]      (TAG: the card, e.g. h100; P: suites at once, 1 to 16, default 4)
# The suites' checks do not depend on their speed, so they may share the GPU. The tree must be
# clean (a record names the exact code it ran): a change is refused before any GPU time is spent.
set -u
usage() { echo "usage: scripts/record_test_gpu.sh TAG [P]  (TAG: letters, digits, '-', e.g. h100; P: suites at once, 1 to 16)" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
tag=$1 p=${2:-4}
[[ $tag =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ ]] || { echo "record_test_gpu: TAG must be letters, digits and '-', beginning with a letter or digit, not '$tag'" >&2; exit 2; }
[[ $p =~ ^[0-9]{1,2}$ ]] && [ "$p" -ge 1 ] && [ "$p" -le 16 ] || { echo "record_test_gpu: P must be 1 to 16, not '$p'" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  echo "record_test_gpu: the tree differs from its commit (git status): commit first; a record names the exact code it ran" >&2; exit 1
fi
git rev-parse --short HEAD > /dev/null 2>&1 || { echo "record_test_gpu: not a git checkout: a record needs the commit it ran" >&2; exit 1; }
nvidia-smi -L > /dev/null 2>&1 || { echo "record_test_gpu: no GPU on this machine (nvidia-smi finds none)" >&2; exit 1; }
rec=$here/results/records/$(date -u +%Y-%m-%d)_test_gpu_$tag
[ -e "$rec" ] && { echo "record_test_gpu: $rec exists: a record is never edited; give another TAG" >&2; exit 1; }
mkdir -p "$rec/logs" || exit 1
suites=$(make -s --no-print-directory gpu-suites)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
printf '{"kind": "test_gpu", "question": "do make test-gpu'"'"'s suites pass on one %s at %s?"}\n' "$card" "$(git rev-parse --short HEAD)" > "$rec/record.json"
cat > "$rec/command.sh" <<EOC
# make test-gpu's suites, $p at a time on one GPU, each logged with its exit code (logs/SUITE.txt,
# logs/SUITE.rc), after the build (logs/build.txt): scripts/record_test_gpu.sh $tag $p
make -j$(nproc) gpu-build > logs/build.txt 2>&1
git rev-parse --short HEAD > logs/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > logs/gpu.txt
printf '%s\n' $suites | xargs -P $p -I{} sh -c 'make -o build/version.cpp --no-print-directory {} > logs/{}.txt 2>&1; echo \$? > logs/{}.rc'
EOC
echo "record_test_gpu: building (logs/build.txt)"
make -j"$(nproc)" gpu-build > "$rec/logs/build.txt" 2>&1 || { echo "record_test_gpu: the build failed: $rec/logs/build.txt" >&2; exit 1; }
git rev-parse --short HEAD > "$rec/logs/commit.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$rec/logs/gpu.txt"
echo "record_test_gpu: $(echo $suites | wc -w) suites, $p at a time"
# (the version stamp is not remade by each suite: -o build/version.cpp)
printf '%s\n' $suites | xargs -P "$p" -I{} sh -c "make -o build/version.cpp --no-print-directory {} > '$rec/logs/{}.txt' 2>&1; echo \$? > '$rec/logs/{}.rc'; echo \"record_test_gpu: {}: exit \$(cat '$rec/logs/{}.rc')\""
python3 "$here/scripts/record_figures.py" "$rec" || exit 1
failed=0; for s in $suites; do [ "$(cat "$rec/logs/$s.rc")" = 0 ] || failed=$((failed + 1)); done
[ $failed = 0 ] || { echo "record_test_gpu: $failed suite(s) failed; the record keeps their logs" >&2; exit 1; }
