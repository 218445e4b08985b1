"""Tiny test harness shared by the Python test files: check() records a result; finish() prints
'NAME: N passed, N failed' and exits non-zero on any failure."""
import glob
import hashlib
import os
import subprocess
import sys

_passed = 0
_failed = 0


def check(name, ok, detail=""):
    global _passed, _failed
    if ok:
        _passed += 1
    else:
        _failed += 1
        print(f"FAIL {name}" + (f": {detail}" if detail else ""), flush=True)
    return ok


def run_tool(cmd, *args, timeout=300):
    """(exit code, standard output and error together) of cmd (a list) run with args."""
    r = subprocess.run(list(cmd) + list(args), capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def edit(path, old, new):
    """The file at path with its first old replaced by new (old must be there: a test that edits
    nothing tests nothing)."""
    with open(path) as f:
        text = f.read()
    assert old in text, (path, old)
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


def no_gpu_env(folder):
    """The environment with a stand-in nvidia-smi first on PATH, in folder, that finds no GPU (as on
    a machine without one: a message and exit 6), and no CUDA_VISIBLE_DEVICES."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "nvidia-smi")
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    os.chmod(path, 0o700)
    env = dict(os.environ, PATH=folder + os.pathsep + os.environ.get("PATH", ""))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def finish(suite):
    print(f"{suite}: {_passed} passed, {_failed} failed", flush=True)
    sys.exit(1 if _failed else 0)


def shard_args(script, suite):
    """(train pattern, validation pattern, trainer's absolute path) from the arguments of a GPU test
    that trains: TRAIN_PATTERN VAL_PATTERN [TRAINER]. Missing arguments (exit 2) or patterns that
    match no shard (exit 1) end it with a message and the suite's failed result line."""
    if len(sys.argv) < 3:
        print(f"usage: python3 tests/{script}.py TRAIN_PATTERN VAL_PATTERN [TRAINER]", file=sys.stderr)
        print(f"{suite}: 0 passed, 1 failed")
        sys.exit(2)
    for what, pat in (("training", sys.argv[1]), ("validation", sys.argv[2])):
        if not glob.glob(pat):
            print(f"{script}: no {what} shards match {pat!r}: run `make data` first, or point TEST_TRAIN_DATA / "
                  "TEST_VAL_DATA at other shards")
            print(f"{suite}: 0 passed, 1 failed")
            sys.exit(1)
    return sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3] if len(sys.argv) > 3 else "./train_gpt")


def digest_tree(paths):
    """What is on disk at these paths (names and contents of files, recursively), to prove that a
    refused command changed nothing."""
    h = hashlib.sha256()
    for p in paths:
        for d, _, names in sorted(os.walk(p)) if os.path.isdir(p) else [(os.path.dirname(p), None, [os.path.basename(p)])]:
            for n in sorted(names):
                f = os.path.join(d, n)
                h.update(f.encode())
                if os.path.isfile(f) and not os.path.islink(f):
                    h.update(open(f, "rb").read())
    return h.hexdigest()


def outcome_problems(rc, out, wants, names, limit, absent=(), names_what="the output"):
    """What is wrong with a refused (or accepted) command's outcome, for the hostile suites: rc is
    its exit status or "hung" (still running after `limit` s); it must be one of `wants`, `out`
    (its stdout and stderr) must name every string of `names` and none of `absent`, and hold no
    traceback."""
    found = []
    if rc == "hung":
        found.append(f"still running after {limit} s")
    elif rc < 0:
        found.append(f"killed by signal {-rc}")
    elif rc not in wants:
        found.append(f"exit {rc}, want {'/'.join(map(str, wants))}")
    if "Traceback" in out:
        found.append("a traceback")
    found += [f"{names_what} does not name {n!r}" for n in names if n not in out]
    found += [f"{names_what} says {n!r}" for n in absent if n in out]
    return found


def tracked_files(root):
    """The repository's files (git's list, those present), or every file but build outputs where
    root is not a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        return [f for f in out.decode().split("\0") if f and os.path.exists(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "build", "__pycache__")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files
