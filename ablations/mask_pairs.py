#!/usr/bin/env python3
"""Useful attention throughput of each prefix-LM mask against the same mask without the prefix,
over several rounds of bench/bench_attention (one JSON file a round; the table mode runs both
masks of a pair back to back, so a round compares them under the same conditions):

    python3 ablations/mask_pairs.py ROUND1.json ROUND2.json ... [--out pairs.md]

For every case with a prefix, its partner is the case of the same shape (T, heads, head dim) and
the same causal, window and document terms with no prefix. Per pair and per direction (forward,
forward + backward): the useful TFLOP/s (kept pairs only) of each over the rounds, mean and
standard deviation, the ratio prefix / partner, and Welch's two-sided p (scripts/ab_stats.py).
A ratio of 1 or more is the prefix mask running at least as fast per useful FLOP.
"""
import argparse
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import ToolError, field, read_json_lines, record, require, run  # noqa: E402

require("scipy", "statsmodels")
import ab_stats as st  # noqa: E402

SHAPE = ("T", "H", "D")
TERMS = ("causal", "window", "blocks", "bidir", "docs")
MAX_DIM = 1 << 24      # a sequence length, head count, head dimension or window past this is no case of the bench
MAX_TFLOPS = 1e5       # far above any GPU's attention throughput


def throughput(c, name, where):
    """A TF/s of the case, checked: a NaN is bench_attention's failed measurement (kept, and named
    in the table); text, infinity, a negative or an impossible figure is refused."""
    v = c.get(name)
    if isinstance(v, float) and math.isnan(v):
        return v
    return field(c, name, where, float, 0, MAX_TFLOPS)


def read_rounds(paths):
    """{(shape, terms, prefix): {"name": ..., "fwd": [...], "fwdbwd": [...]}} over the files."""
    cases = {}
    for path in paths:
        found = 0
        for where, c in read_json_lines(path, "benchmark JSON"):
            found += 1
            c = record(c, where, "a case of bench_attention (a JSON object)")
            key = (tuple(field(c, k, where, int, 1, MAX_DIM) for k in SHAPE),
                   tuple(field(c, k, where, int, 0, MAX_DIM) for k in TERMS), field(c, "prefix", where, int, 0, MAX_DIM, default=0))
            tf, tfb = throughput(c, "fwd_tflops", where), throughput(c, "fwdbwd_tflops", where)
            entry = cases.setdefault(key, {"name": str(c.get("case", "?")), "fwd": [], "fwdbwd": []})
            entry["fwd"].append(tf)
            entry["fwdbwd"].append(tfb)
        if not found:  # a round that measured nothing (an interrupted bench): it would silently weigh nothing
            raise ToolError(f"{path}: holds no case (empty or blank): not a round of bench_attention's JSON lines")
    return cases


def pairs(cases):
    """(shape, prefix case, partner case) for every prefix case whose partner was measured."""
    out = []
    for (shape, terms, prefix), c in sorted(cases.items()):
        if prefix and (shape, terms, 0) in cases:
            out.append((shape, c, cases[(shape, terms, 0)]))
    return out


def md(text):
    """Text for a markdown table cell: '|' escaped, line breaks as spaces."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def cell(v):
    """Mean +- standard deviation over the rounds, or why there is none."""
    bad = sum(not math.isfinite(x) for x in v)
    if bad:
        return f"n/a ({bad} of {len(v)} rounds not finite: a failed measurement)"
    if len(v) < 2:
        return f"{v[0]:.1f} (1 round: no spread)"
    return f"{st.mean(v):.1f} +- {st.std(v):.1f}"


def table(cases):
    lines = ["| T, heads, head dim | mask | partner | rounds | direction | prefix TF/s | partner TF/s | ratio | Welch p |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for shape, a, b in pairs(cases):
        for d, label in (("fwd", "forward"), ("fwdbwd", "forward + backward")):
            x, y = a[d], b[d]
            finite = all(math.isfinite(v) for v in x + y)
            ratio = f"{st.mean(x) / st.mean(y):.4f}" if finite and st.mean(y) > 0 else "n/a"
            if not finite:
                p = "n/a (not finite)"
            elif len(x) > 1 and len(y) > 1:
                p = f"{st.welch(x, y)[2]:.3f}"
            else:
                p = "n/a (1 round)"
            lines.append(f"| {md(shape[0])}, {md(shape[1])}, {md(shape[2])} | {md(a['name'])} | {md(b['name'])} | "
                         f"{min(len(x), len(y))} | {label} | {cell(x)} | {cell(y)} | {ratio} | {p} |")
    return lines


def main(argv):
    ap = argparse.ArgumentParser(prog="mask_pairs", description=__doc__.split("\n\n")[0])
    ap.add_argument("rounds", nargs="+", help="bench_attention JSON files, one a round")
    ap.add_argument("--out", default="", help="also write the table here (must not exist)")
    a = ap.parse_args(argv)
    cases = read_rounds(a.rounds)
    if not pairs(cases):
        raise ToolError("no prefix case with its partner in these files (bench_attention's table mode measures both)")
    text = "\n".join(table(cases)) + "\n"
    if a.out:  # written beside it, then linked into place: never a partial table, never over a file
        if os.path.lexists(a.out):
            raise ToolError(f"--out {a.out}: exists; name a new file")
        fd, tmp = tempfile.mkstemp(prefix=".mask_pairs-", dir=os.path.dirname(os.path.abspath(a.out)))
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.link(tmp, a.out)
        except FileExistsError:
            raise ToolError(f"--out {a.out}: exists; name a new file")
        finally:
            os.unlink(tmp)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "mask_pairs")
