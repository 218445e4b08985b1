"""The figures the README and bench/RESULTS.md write in sentences (scripts/page_figures.py): every one
is a figure of the record its paragraph names, and the check fails on a figure edited by hand, on a
figure that names no record, and on a record that does not exist."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = [sys.executable, os.path.join(ROOT, "scripts", "page_figures.py")]


def tool(*args):
    r = subprocess.run(TOOL + list(args), capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


# the repository's own pages
rc, out = tool(ROOT)
check("every figure the README's 'What works' and bench/RESULTS.md write is a figure of the record they name", rc == 0, out[-3000:])

README = """# Project

## The two commands

Run 2 commands (outside the claims: not checked).

## What works

- **Speed:** 0.751-0.800x the peer's time, 337.5 s against 449.1 s, peak 27,137 MiB, 2.4% more
  (record `2026-11-28_full_run_h100x4`, at `a2b726e`, on 2026-11-28).
- **Learning:** Welch p >= 0.13 on 4 GPUs (records `2026-11-23_ab_*`).
- Not done yet: eight GPUs.

## Layout

| a | 17 |
"""
RESULTS = """# Results

## The whole schedule

Record `results/records/2026-11-28_full_run_h100x4`: 337.5 s against 449.1 s (0.751x).

<!-- figures: 2026-11-28_full_run_h100x4 -->
| a table record_figures.py checks | 99.99 |
<!-- /figures -->
"""
FIGURES = {"2026-11-28_full_run_h100x4": {"kind": "t", "ours_s": 337.51, "peer_s": 449.1, "ratio": 0.75144, "peak_mib": 27137,
                                          "more": 0.0241, "memory_ratio": 0.8},
           "2026-11-23_ab_campaign_learning-one": {"kind": "t", "p": [0.1331, 0.5], "gpus": 4}}


def tree():
    tmp = tempfile.mkdtemp(prefix="page_figures_test_")
    for name, fig in FIGURES.items():
        os.makedirs(os.path.join(tmp, "results", "records", name))
        json.dump(fig, open(os.path.join(tmp, "results", "records", name, "figures.json"), "w"))
    os.makedirs(os.path.join(tmp, "bench"))
    open(os.path.join(tmp, "README.md"), "w").write(README)
    open(os.path.join(tmp, "bench", "RESULTS.md"), "w").write(RESULTS)
    return tmp


tmp = tree()
try:
    rc, out = tool(tmp)
    check("figures rounded from their records, a percentage, thousands grouped, a record named by a pattern: passed; "
          "numbers outside 'What works', in quoted tables, in backticks and in dates: not checked", rc == 0, out)

    def caught(what, page, old, new, expect):
        path = os.path.join(tmp, page)
        text = open(path).read()
        assert old in text, (page, old)
        open(path, "w").write(text.replace(old, new, 1))
        rc, out = tool(tmp)
        open(path, "w").write(text)
        check(f"refused: {what}", rc == 1 and expect in out, out)

    caught("a figure edited by one digit", "README.md", "337.5 s against", "337.6 s against",
           "README.md:9: 337.6 is not a figure of 2026-11-28_full_run_h100x4")
    caught("the upper end of a range edited", "README.md", "0.751-0.800x", "0.751-0.900x",
           "README.md:9: 0.900 is not a figure of 2026-11-28_full_run_h100x4")
    caught("a figure written with more digits than the record rounds to", "bench/RESULTS.md", "(0.751x)", "(0.7516x)",
           "bench/RESULTS.md:5: 0.7516 is not a figure")
    caught("a figure in a paragraph that names no record", "README.md", "- Not done yet: eight GPUs.", "- Not done yet: 8 GPUs.",
           "README.md:12: figures (8) that name no record")
    caught("a record that does not exist", "README.md", "`2026-11-23_ab_*`", "`2026-11-24_ab_*`",
           "names record 2026-11-24_ab_*, which is not under results/records")
    caught("a figure of another record than the one named", "bench/RESULTS.md", "337.5 s against 449.1 s (0.751x)",
           "337.5 s against 449.1 s (0.751x, p 0.1331)", "0.1331 is not a figure of 2026-11-28_full_run_h100x4")
    rc, out = tool(os.path.join(tmp, "nothing"))
    check("a root that is not a folder: exit 1, named", rc == 1 and "nothing: no such folder" in out, out)
    rc, out = tool("--bogus")
    check("an unknown flag: exit 2", rc == 2 and "unknown flag" in out, out)
    open(os.path.join(tmp, "results", "records", "2026-11-28_full_run_h100x4", "figures.json"), "w").write("{nan")
    rc, out = tool(tmp)
    check("a figures file that is not JSON: exit 1, named, no traceback",
          rc == 1 and "figures.json" in out and "Traceback" not in out, out)
finally:
    shutil.rmtree(tmp)

finish("page-figures")
