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
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import ab_stats as st  # noqa: E402
from tool_errors import ToolError, regular_file, run  # noqa: E402

SHAPE = ("T", "H", "D")
TERMS = ("causal", "window", "blocks", "bidir", "docs")


def read_rounds(paths):
    """{(shape, terms, prefix): {"name": ..., "fwd": [...], "fwdbwd": [...]}} over the files."""
    cases = {}
    for path in paths:
        regular_file(path, "benchmark JSON")
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    c = json.loads(line)
                    key = (tuple(c[k] for k in SHAPE), tuple(c[k] for k in TERMS), c.get("prefix", 0))
                    tf, tfb = float(c["fwd_tflops"]), float(c["fwdbwd_tflops"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                    raise ToolError(f"{path}:{n}: not a case of bench_attention ({e})")
                entry = cases.setdefault(key, {"name": c.get("case", "?"), "fwd": [], "fwdbwd": []})
                entry["fwd"].append(tf)
                entry["fwdbwd"].append(tfb)
    return cases


def pairs(cases):
    """(shape, prefix case, partner case) for every prefix case whose partner was measured."""
    out = []
    for (shape, terms, prefix), c in sorted(cases.items()):
        if prefix and (shape, terms, 0) in cases:
            out.append((shape, c, cases[(shape, terms, 0)]))
    return out


def table(cases):
    lines = ["| T, heads, head dim | mask | partner | rounds | direction | prefix TF/s | partner TF/s | ratio | Welch p |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for shape, a, b in pairs(cases):
        for d, label in (("fwd", "forward"), ("fwdbwd", "forward + backward")):
            x, y = a[d], b[d]
            p = st.welch(x, y)[2] if len(x) > 1 and len(y) > 1 else float("nan")
            fmt = lambda v: f"{st.mean(v):.1f} +- {st.std(v):.1f}"  # noqa: E731
            lines.append(f"| {shape[0]}, {shape[1]}, {shape[2]} | {a['name']} | {b['name']} | {min(len(x), len(y))} | {label} | "
                         f"{fmt(x)} | {fmt(y)} | {st.mean(x) / st.mean(y):.4f} | {p:.3f} |")
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
    if a.out:
        with open(a.out, "x") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "mask_pairs")
