#!/usr/bin/env python3
"""The figures a page writes in prose, checked against the records they name.

A claim's page (the README's "What works" and bench/RESULTS.md) gives its figures in sentences as
well as in the tables that record_figures.py quotes. Each paragraph, or item of a list, that holds
a figure names the record it comes from: `results/records/NAME`, or `NAME` in backticks, where NAME
is a record's folder or a shell pattern matching several (`2026-11-23_ab_campaign_learning-*`).
Every number written in it, outside backticks, must then be one of the named records' figures
(figures.json, any value at any depth) as printed: rounded to the digits it is written with, or
as a percentage of it. A paragraph with a number that names no record, a record that does not
exist, and a number that no named record holds are refused, naming the page, its line and the
number. Dates (YYYY-MM-DD) are the records' own and are not figures; a commit, path or command
goes in backticks. Quoted tables (between '<!-- figures: ... -->' markers) are record_figures.py's.

    python3 scripts/page_figures.py [ROOT]     checks the pages of the repository at ROOT (default .)
"""
import fnmatch
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, load_json, run  # noqa: E402
from record_kinds.common import read_page, read_text  # noqa: E402

PROG = "page_figures"
# A number as a page writes it: digits with an optional fraction ("27,137" groups thousands), not
# part of a word (H100, bf16, 5a3ed96) and not a date; "0.751x" and "2.4%" are numbers, and both
# ends of a range ("1.965-1.980x") are. A sign is not read: a figure is compared by its size.
NUMBER = re.compile(r"(?<![\w.,/])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?=[x%]?(?![\w]))")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
CODE = re.compile(r"`[^`\n]*`")
REF = re.compile(r"`(?:results/records/)?((?:\d{4}-\d{2}-\d{2}|\*)_[A-Za-z0-9_.*?+-]+?)/?`")
QUOTED = re.compile(r"^<!-- figures: \S+ -->\n.*?^<!-- /figures -->\n", re.S | re.M)


def units(text):
    """(first line number, text) of each paragraph, heading or list item of a page's text."""
    out, cur, start = [], [], 0
    for n, line in enumerate(text.splitlines(), 1):
        opens = re.match(r"\s*(?:[-*]|\d+\.)\s", line) or line.startswith("#")
        if not line.strip() or opens:
            if cur:
                out.append((start, "\n".join(cur)))
            cur = []
            if not line.strip():
                continue
        if not cur:
            start = n
        cur.append(line)
        if line.startswith("#"):
            out.append((start, line))
            cur = []
    if cur:
        out.append((start, "\n".join(cur)))
    return out


def numbers_of(value):
    """Every number in a record's figures, at any depth."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [x for v in value.values() for x in numbers_of(v)]
    if isinstance(value, list):
        return [x for v in value for x in numbers_of(v)]
    return []


def written(value, decimals):
    return f"{value:.{decimals}f}"


def holds(values, token):
    """Whether a record's figures hold a number as the page writes it (token without its commas)."""
    decimals = len(token.split(".")[1]) if "." in token else 0
    for v in values:
        if written(v, decimals) == token or written(abs(v) * 100, decimals) == token or written(abs(v), decimals) == token:
            return True
    return False


def check_text(page, text, figures):
    """The problems of one page's text, given every record's figures by name."""
    bad = []
    text = QUOTED.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # (record_figures.py checks these)
    for line, unit in units(text):
        refs = REF.findall(unit)
        plain = DATE.sub(" ", CODE.sub(" ", re.sub(r"<!--.*?-->", " ", unit, flags=re.S)))
        tokens = [(m.group(1) + (m.group(2) or "")) for m in NUMBER.finditer(plain)]
        if unit.startswith("#") or not tokens:
            continue
        named = []
        for ref in refs:
            found = sorted(n for n in figures if fnmatch.fnmatchcase(n, ref))
            if not found:
                bad.append(f"{page}:{line}: names record {ref}, which is not under results/records")
            named += found
        if not refs:
            bad.append(f"{page}:{line}: figures ({', '.join(tokens[:4])}) that name no record "
                       "(a record in backticks: `results/records/NAME`)")
            continue
        values = [v for n in named for v in numbers_of(figures[n])]
        for token in tokens:
            if named and not holds(values, token.replace(",", "")):
                bad.append(f"{page}:{line}: {token} is not a figure of {', '.join(named)} (as written, to its digits)")
    return bad


def claim_pages(top):
    """(path, text) of the pages whose prose claims figures: the README's "What works" section, whole
    bench/RESULTS.md."""
    out = []
    readme = os.path.join(top, "README.md")
    if os.path.isfile(readme):
        text = read_page(readme)
        m = re.search(r"^## What works.*?(?=^## |\Z)", text, re.S | re.M)
        if m:  # lines before the section stay as blank lines, so that line numbers are the file's
            out.append((readme, "\n" * text[:m.start()].count("\n") + m.group(0)))
    results = os.path.join(top, "bench", "RESULTS.md")
    if os.path.isfile(results):
        out.append((results, read_page(results)))
    return out


def load_figures(top):
    figures = {}
    for rec in sorted(glob.glob(os.path.join(top, "results", "records", "*", "figures.json"))):
        name = os.path.basename(os.path.dirname(rec))
        figures[name] = load_json(read_text(rec, "figures file"), rec)
    return figures


def check(top, figures=None):
    """Every claim page's problems, as lines naming page, line and number."""
    figures = load_figures(top) if figures is None else figures
    return [b for page, text in claim_pages(top) for b in check_text(os.path.relpath(page, top), text, figures)]


def main():
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(args) > 1 or (args and args[0].startswith("-")):
        print(f"{PROG}: error: unknown flag or extra argument in {' '.join(args)!r}; see --help", file=sys.stderr)
        return 2
    top = args[0] if args else "."
    if not os.path.isdir(top):
        raise ToolError(f"{top}: no such folder (the repository's root)")
    bad = check(top)
    for b in bad:
        print(f"{PROG}: {b}", file=sys.stderr)
    print(f"{PROG}: {len(claim_pages(top))} pages, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    run(main, PROG)
