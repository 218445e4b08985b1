#!/usr/bin/env python3
"""The figures of a result record, computed from its logs, and the pages that quote them.

A record is a dated folder under results/records/ (DATE_NAME), never edited after it lands:
  record.json   {"kind": KIND, "question": "..."}: what the logs are and what they answer;
  command.sh    the commands that made the logs;
  logs/         the logs, each stamped with the commit its binaries were built from;
  figures.json  written by this script from the logs, never by hand.
Kinds: one module a kind in scripts/record_kinds/, whose docstring says what logs it reads and
what figures it writes (python3 scripts/record_figures.py --kinds lists them).
A commit that is unknown or "-dirty" (tracked files differed from it) is refused: a record names
the exact code it ran. Its logs name the source digest its build computed; a record dated before
the build computed one (2026-12-07) names the commit alone, and its pages say so.

A page quotes a record's figures as a table between '<!-- figures: RECORD -->' and
'<!-- /figures -->', which this script writes (--pages) and checks.

    python3 scripts/record_figures.py RECORD_DIR          writes RECORD_DIR/figures.json
    python3 scripts/record_figures.py --check [ROOT]      recomputes every record under ROOT
        (default results/records) and every quoted table in ROOT/../**/*.md, README.md and
        bench/RESULTS.md; exit 1 on any difference, naming the record and the figure
    python3 scripts/record_figures.py --pages [ROOT]      rewrites the quoted tables
    python3 scripts/record_figures.py --kinds             the kinds, each with what it reads and writes
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, load_json, regular_file, run  # noqa: E402
from record_kinds import KINDS  # noqa: E402
from record_kinds.common import read_page, read_text, record_date  # noqa: E402

PROG = "record_figures"
QUOTE = re.compile(r"^<!-- figures: (\S+) -->\n(.*?)^<!-- /figures -->\n", re.S | re.M)  # markers open their lines


def compute(rec):
    meta = load_json(read_text(os.path.join(rec, "record.json"), "record file"), f"{rec}/record.json")
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind not in KINDS:
        raise ToolError(f"{rec}/record.json: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not os.path.exists(os.path.join(rec, "command.sh")):
        raise ToolError(f"{rec}: no command.sh (the commands that made the logs)")
    regular_file(os.path.join(rec, "command.sh"), "command file")
    record_date(rec)
    fig = KINDS[kind].compute(rec, meta)
    if not isinstance(fig, dict) or fig.get("kind") != kind:
        raise ToolError(f"{rec}: kind {kind} computed figures of another kind")  # a kind module's fault, named
    return fig


def dump(fig):
    return json.dumps(fig, indent=1, sort_keys=False) + "\n"


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    return KINDS[fig["kind"]].table(rec_name, fig)


def pages(root):
    top = os.path.dirname(os.path.dirname(os.path.abspath(root)))  # results/records -> the repository
    found = glob.glob(os.path.join(top, "results", "**", "*.md"), recursive=True)
    return [p for p in found + [os.path.join(top, "README.md"), os.path.join(top, "bench", "RESULTS.md")] if os.path.isfile(p)]


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    if args == ["--kinds"]:
        for kind, module in KINDS.items():
            print(f"{kind}:\n  " + "\n  ".join(module.__doc__.strip().splitlines()))
        return 0
    mode = args[0] if args[0] in ("--check", "--pages") else "write"
    if (mode == "write" and (len(args) != 1 or args[0].startswith("-"))) or len(args) > 2:
        print(f"{PROG}: error: unknown flag or extra argument in {' '.join(args)!r}; see --help", file=sys.stderr)
        return 2
    if mode == "write":
        fig = compute(args[0].rstrip("/"))
        with open(os.path.join(args[0], "figures.json"), "w") as f:
            f.write(dump(fig))
        print(f"{PROG}: {args[0]}/figures.json written")
        return 0
    root = args[1] if len(args) > 1 else "results/records"
    if not os.path.isdir(root):
        raise ToolError(f"{root}: no such folder of records")
    bad, n, figs = [], 0, {}
    for rec in sorted(glob.glob(os.path.join(root, "*"))):
        name = os.path.basename(rec)
        if name == "README.md":
            continue
        if os.path.islink(rec) or not os.path.isdir(rec):
            bad.append(f"{rec}: not a record's folder (a record is a folder of its own, never a link or a file)")
            continue
        if not os.path.exists(os.path.join(rec, "record.json")):
            bad.append(f"{rec}: no record.json: not a record, or one whose kind is lost")
            continue
        fig = compute(rec)
        figs[name] = fig
        n += 1
        fpath = os.path.join(rec, "figures.json")
        if mode == "--check" and not os.path.exists(fpath):
            bad.append(f"{fpath}: missing (write it: scripts/record_figures.py {rec})")
        elif mode == "--check" and read_text(fpath, "figures file") != dump(fig):  # to the character: 2655.0 is no 2655
            have = load_json(read_text(fpath, "figures file"), fpath)
            want = json.loads(dump(fig))
            keys = sorted(k for k in set(want) | set(have if isinstance(have, dict) else {})
                          if not isinstance(have, dict) or json.dumps(have.get(k)) != json.dumps(want.get(k)))
            bad.append(f"{fpath}: does not recompute from the logs (differs in {', '.join(keys) or 'its layout'})")
    for page in pages(root):
        text = read_page(page)
        opened = len(re.findall(r"^\s*<!--\s*figures\s*:", text, re.M))
        closed = len(re.findall(r"^\s*<!--\s*/\s*figures\s*-->", text, re.M))
        if not (opened == closed == len(QUOTE.findall(text))):
            bad.append(f"{page}: a figures marker without its match ({opened} opened, {closed} closed; each quote is "
                       "'<!-- figures: RECORD -->', a line break, its table, '<!-- /figures -->' and a line break)")
            continue

        def quoted(m):
            name = m.group(1)
            if name not in figs:
                bad.append(f"{page}: quotes record {name}, which is not under {root}")
                return m.group(0)
            want = table(name, figs[name])
            if mode == "--check" and m.group(2) != want:
                bad.append(f"{page}: the quoted figures of {name} differ from its figures.json")
            return f"<!-- figures: {name} -->\n{want}<!-- /figures -->\n"

        new = QUOTE.sub(quoted, text)
        if mode == "--pages" and new != text:
            with open(page, "w", encoding="utf-8", newline="") as f:
                f.write(new)
            print(f"{PROG}: {page} rewritten")
    for b in bad:
        print(f"{PROG}: {b}", file=sys.stderr)
    if mode == "--check":
        print(f"{PROG}: {n} records, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    run(main, PROG)
