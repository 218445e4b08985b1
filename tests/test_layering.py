"""Every #include "..." of the C++/CUDA sources follows the folders' layering:

    train -> model, optim -> attention / gemm / layers / data -> hopper -> common

A file may include its own folder and the folders on levels below its own: never a folder above
it, nor one beside it on its level (attention, gemm, layers and data know nothing of each other;
what two of them share goes below them, in hopper/ or common/). The top (train_gpt.cu, bench/,
tests/) may include any folder. A quoted include resolves against the including file's folder
first, then the repository root; one that resolves to no file fails, and so does a source in a
folder the table below does not place.

    python3 tests/test_layering.py
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, tracked_files  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# level of each folder (higher includes lower); "" is the repository root (train_gpt.cu)
LEVELS = {
    "": 5, "bench": 5, "tests": 5,
    "train": 4,
    "model": 3, "optim": 3,
    "attention": 2, "gemm": 2, "layers": 2, "data": 2,
    "hopper": 1,
    "common": 0,
}
TOP = 5
SOURCE_EXT = (".cu", ".cuh", ".h", ".hpp", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder(path):
    """The top-level folder of a repository path ("" for a file at the root)."""
    return path.split("/", 1)[0] if "/" in path else ""


def violation(src, dst):
    """Why src may not include dst (repository paths), or None where it may."""
    a, b = folder(src), folder(dst)
    if a not in LEVELS:
        return f"{src}: its folder {a}/ has no level in tests/test_layering.py"
    if b not in LEVELS:
        return f"{src} includes {dst}: its folder {b}/ has no level in tests/test_layering.py"
    if a == b or LEVELS[a] == TOP or LEVELS[b] < LEVELS[a]:
        return None
    where = "above" if LEVELS[b] > LEVELS[a] else "beside"
    return f"{src} includes {dst}: {b or 'the root'}/ is {where} {a}/"


def resolve(src, name):
    """The repository path of `#include "name"` in src, or None where no file matches."""
    for cand in (os.path.join(os.path.dirname(src), name), name):
        cand = os.path.normpath(cand)
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def problems(files, read):
    out = []
    for f in files:
        for m in INCLUDE.finditer(read(f)):
            dst = resolve(f, m.group(1))
            if dst is None:
                out.append(f'{f}: #include "{m.group(1)}" names no file in the repository')
                continue
            why = violation(f, dst)
            if why:
                out.append(why)
    return out


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return fh.read()


# the rule itself, on known pairs
check("violation(): a folder includes itself and the levels below",
      all(violation(s, d) is None for s, d in [
          ("layers/a.cuh", "layers/b.cuh"), ("gemm/a.cuh", "hopper/b.cuh"), ("hopper/a.cuh", "common/b.cuh"),
          ("model/a.cuh", "gemm/b.cuh"), ("train/a.cuh", "optim/b.cuh"), ("train_gpt.cu", "train/a.h"),
          ("tests/a.cu", "gemm/b.cuh"), ("optim/a.cuh", "layers/b.cuh")]))
check("violation(): upward and sideways includes are refused",
      all(violation(s, d) for s, d in [
          ("layers/a.cuh", "gemm/b.cuh"), ("gemm/a.cuh", "layers/b.cuh"), ("attention/a.cuh", "layers/b.cuh"),
          ("common/a.h", "hopper/b.cuh"), ("model/a.cuh", "train/b.h"), ("model/a.cuh", "optim/b.cuh"),
          ("gemm/a.cuh", "train_gpt.cu"), ("layers/a.cuh", "newdir/b.h"), ("newdir/a.h", "common/b.h")]))

sources = [f for f in tracked_files(ROOT) if f.endswith(SOURCE_EXT)]
check("C++/CUDA sources found", len(sources) > 50, str(len(sources)))
check("the include reader finds the includes",
      sum(len(INCLUDE.findall(read(f))) for f in sources) > 200)
bad = problems(sources, read)
check("no #include goes against the folders' layering", not bad, "\n".join(bad))

finish("layering")
