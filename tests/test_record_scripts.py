"""The scripts that make result records (scripts/record_default_job.sh, scripts/record_test_gpu.sh)
refuse bad arguments, a tree that differs from its commit, a machine without a GPU and a record
that exists, each with a line and before any GPU time is spent; none writes a record then.
Run on a clone of this repository's commit, with a stand-in nvidia-smi first on PATH, so that the
test behaves the same on a machine with a GPU.

    python3 tests/test_record_scripts.py
"""
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(clone, script, *args, gpu=False):
    """(exit code, output) of a record script in the clone, with an nvidia-smi that finds a GPU
    (gpu=True) or none; the records folder's entries before and after must be the same."""
    fake = os.path.join(clone, ".fakebin")
    os.makedirs(fake, exist_ok=True)
    with open(os.path.join(fake, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\n" + ("echo 'NVIDIA Test Card'\nexit 0\n" if gpu else "exit 9\n"))
    os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
    env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"])
    records = os.path.join(clone, "results", "records")
    before = sorted(os.listdir(records))
    # every refusal comes before the build: a script that goes on to build is stopped, with its
    # children (its own process group), and fails the check
    p = subprocess.Popen(["bash", os.path.join(clone, "scripts", script)] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=clone, env=env, stdin=subprocess.DEVNULL,
                         process_group=0)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out = p.communicate()[0] + "\n(still running after 30 s: stopped)"
    after = sorted(os.listdir(records))
    return p.returncode, out.strip(), before == after


tmp = tempfile.mkdtemp(prefix="record_scripts_")
try:
    clone = os.path.join(tmp, "repo")
    subprocess.run(["git", "clone", "-q", ROOT, clone], check=True, timeout=300)
    # the scripts and the Makefile as they are in this tree (a change under test may not be
    # committed yet), committed in the clone, so that its tree is clean
    for f in ("scripts/record_test_gpu.sh", "scripts/record_default_job.sh", "Makefile"):
        shutil.copy(os.path.join(ROOT, f), os.path.join(clone, f))
    git = ["git", "-C", clone, "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(git + ["add", "scripts/record_test_gpu.sh", "scripts/record_default_job.sh", "Makefile"], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "the tree under test"], check=True)
    with open(os.path.join(clone, ".git", "info", "exclude"), "a") as f:
        f.write("/.fakebin/\n")

    for script, args, code, words in (
            ("record_test_gpu.sh", [], 2, "usage"),
            ("record_test_gpu.sh", ["bad tag"], 2, "TAG must be letters"),
            ("record_test_gpu.sh", ["h100", "0"], 2, "P must be 1 to 16"),
            ("record_test_gpu.sh", ["h100", "x"], 2, "P must be 1 to 16"),
            ("record_test_gpu.sh", ["h100", "4", "more"], 2, "usage"),
            ("record_test_gpu.sh", ["h100"], 1, "no GPU on this machine"),
            ("record_default_job.sh", [], 2, "usage"),
            ("record_default_job.sh", ["0", "h100"], 2, "N must be 1 to 100"),
            ("record_default_job.sh", ["101", "h100"], 2, "N must be 1 to 100"),
            ("record_default_job.sh", ["3", "h/100"], 2, "TAG must be letters"),
            ("record_default_job.sh", ["3", "h100", "./no_such_trainer"], 1, "no such trainer"),
            ("record_default_job.sh", ["3", "h100", "/bin/true"], 1, "no GPU on this machine")):
        rc, out, same = run(clone, script, *args)
        check(f"{script} {' '.join(args) or '(no argument)'}: exit {code}, saying '{words}', no record written",
              rc == code and words in out and same, f"exit {rc}: {out[-300:]}")

    # a record that exists is never edited: refused before the build
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    existing = os.path.join(clone, "results", "records", f"{day}_test_gpu_dup")
    os.makedirs(existing)
    rc, out, same = run(clone, "record_test_gpu.sh", "dup", gpu=True)
    check("record_test_gpu.sh: a record of that date and TAG exists: refused, untouched",
          rc == 1 and "exists: a record is never edited" in out and same and os.listdir(existing) == [], f"exit {rc}: {out[-300:]}")

    # a tree that differs from its commit: refused before any GPU time
    readme = os.path.join(clone, "README.md")
    with open(readme, "a") as f:
        f.write("\nan edit\n")
    rc, out, same = run(clone, "record_test_gpu.sh", "h100", gpu=True)
    check("record_test_gpu.sh: a tracked file changed: refused, naming git status, no record",
          rc == 1 and "differs from its commit" in out and same, f"exit {rc}: {out[-300:]}")
    rc, out, same = run(clone, "record_default_job.sh", "3", "h100", "/bin/true", gpu=True)
    check("record_default_job.sh: a tracked file changed: refused before any run, naming git status, no record",
          rc == 1 and "differs from its commit" in out and same, f"exit {rc}: {out[-300:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
finish("record-scripts")
