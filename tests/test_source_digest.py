"""The source digest that train_gpt's log names (its first line: run_id:ID train_gpt COMMIT
source:DIGEST) is computed by the build, never set by hand: `make source-digest` and the
generated build/version.cpp (made in a copy of the tree) give the SHA-256 that this test
recomputes independently (hashlib over the same files: every tracked .cu .cuh .h .cpp outside
tests/ and bench/, the shipped recipes recipes/*.toml, and the Makefile), and the digest changes when one byte of one of those
files does (on a copy of the tree).

    python3 tests/test_source_digest.py
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, tracked_files  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sources(files):
    return sorted(f for f in files if (f.endswith((".cu", ".cuh", ".h", ".cpp")) or f == "Makefile"
                                       or (f.startswith("recipes/") and f.endswith(".toml")))
                  and not f.startswith(("tests/", "bench/")))


def digest(root, files):
    """sha256 of sha256sum's lines ("HASH  PATH\\n") for the files, in path order."""
    lines = "".join(f"{hashlib.sha256(open(os.path.join(root, f), 'rb').read()).hexdigest()}  {f}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def make_digest(root):
    r = subprocess.run(["make", "-s", "--no-print-directory", "source-digest"], cwd=root, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else f"make failed: {r.stderr.strip()}"


files = sources(tracked_files(ROOT))
check("the digest covers the trainer's sources", "train_gpt.cu" in files and "Makefile" in files and "gemm/gemm.cuh" in files
      and "recipes/2024-12-10.toml" in files and not any(f.startswith("tests/") for f in files), str(len(files)))
want = digest(ROOT, files)
got = make_digest(ROOT)
check("make source-digest equals the digest recomputed here", got == want, f"make {got}, here {want}")

# one byte of one source changed (on a copy of the tree, outside git): the digest changes, and
# the build's fallback without git lists the same files as git does here
with tempfile.TemporaryDirectory() as tmp:
    for f in files:
        os.makedirs(os.path.join(tmp, os.path.dirname(f)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, f), os.path.join(tmp, f))
    check("without git: the same digest", make_digest(tmp) == want, make_digest(tmp))
    r = subprocess.run(["make", "-s", "--no-print-directory", "build/version.cpp"], cwd=tmp, capture_output=True, text=True)
    text = open(os.path.join(tmp, "build", "version.cpp")).read() if r.returncode == 0 else r.stderr
    m = re.search(r'kSourceDigest = "([0-9a-f]{64})"', text)
    check("the build writes the digest into build/version.cpp", m and m.group(1) == want, text)
    path = os.path.join(tmp, "gemm/config.cuh")
    data = bytearray(open(path, "rb").read())
    data[-2] ^= 1
    open(path, "wb").write(bytes(data))
    changed = make_digest(tmp)
    check("one byte changed in gemm/config.cuh: another digest", re.fullmatch(r"[0-9a-f]{64}", changed) and changed != want
          and changed == digest(tmp, files), changed)

finish("source-digest")
