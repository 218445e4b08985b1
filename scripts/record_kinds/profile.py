"""Record kind profile: logs/*.txt: `./train_gpt ... --profile K` runs of one host at one commit
(one GPU, or rank 0 of several), each log's 'profile: GPU time per step by category, over K
steps' table. Figures: the card, the commit; per log its GPU count, the profiled steps, each
category's ms a step (in the log's order) and the total, which the categories must sum to
within their printed rounding (0.005 ms each).
"""
import glob
import os
import re

from tool_errors import ToolError
from record_kinds.common import checked_source, number, read_text, stamp_text, train_gpt_card, train_gpt_stamp

KIND = "profile"
HEAD = re.compile(r"^profile: GPU time per step by category, over (\d+) steps$")
ROW = re.compile(r"^  (\S.*?)\s+(\S+) ms\s+(\S+)%$")
TOTAL = re.compile(r"^  total\s+(\S+) ms$")


def category_table(path, lines):
    """(profiled steps, [{"category", "ms"}], total ms) of a log's 'by category' table, or ToolError
    naming the log and line."""
    heads = [i for i, line in enumerate(lines) if HEAD.match(line)]
    if len(heads) != 1:
        raise ToolError(f"{path}: {len(heads)} 'profile: GPU time per step by category' tables (a profiled run prints one)")
    i = heads[0]
    steps = int(HEAD.match(lines[i]).group(1))
    cats, total = [], None
    for j in range(i + 1, len(lines)):
        t = TOTAL.match(lines[j])
        if t:
            total = number(t.group(1), f"{path}:{j + 1}", "the total")
            break
        r = ROW.match(lines[j])
        if not r:
            raise ToolError(f"{path}:{j + 1}: not a category's row ('  NAME  X ms  P%') before the table's total")
        cats.append({"category": r.group(1), "ms": number(r.group(2), f"{path}:{j + 1}", f"{r.group(1)}'s ms")})
    if total is None or not cats:
        raise ToolError(f"{path}:{i + 1}: the category table has no rows or no total line")
    if len({c["category"] for c in cats}) != len(cats):
        raise ToolError(f"{path}:{i + 1}: a category named twice")
    s = sum(c["ms"] for c in cats)
    if abs(s - total) > 0.005 * (len(cats) + 1) + 1e-9:  # each printed to 0.01 ms
        raise ToolError(f"{path}:{i + 1}: the categories sum to {s:.2f} ms, not the total {total} ms")
    return steps, cats, total


def _log(path):
    text = read_text(path)
    lines = text.splitlines()
    _, commit, source = train_gpt_stamp(path, lines)
    card, gpus = train_gpt_card(path, text)
    steps, cats, total = category_table(path, lines)
    fig = {"log": os.path.basename(path), "gpus": gpus, "profiled_steps": steps, "categories": cats, "total_ms": total}
    return fig, commit, card, source


def compute(rec, meta):
    paths = sorted(glob.glob(os.path.join(rec, "logs", "*.txt")))
    if not paths:
        raise ToolError(f"{rec}/logs: no *.txt log")
    runs, commits, cards, sources = [], set(), set(), set()
    for p in paths:
        fig, commit, card, source = _log(p)
        runs.append(fig)
        commits.add(commit)
        cards.add(card)
        sources.add(source)
    if len(commits) != 1 or len(cards) != 1:
        raise ToolError(f"{rec}/logs: the logs name {len(commits)} commits and {len(cards)} cards: a record is one code on one card "
                        f"({', '.join(sorted(commits))}; {', '.join(sorted(cards))})")
    runs.sort(key=lambda r: (r["gpus"], r["log"]))
    out = {"kind": KIND, "commit": commits.pop(), "card": cards.pop()}
    source = checked_source(rec, sources, f"{rec}/logs")
    if source:
        out["source"] = source
    out["runs"] = runs
    return out


def table(rec_name, fig):
    """The markdown table a page quotes for a record: a row a category, a column a log."""
    runs = fig["runs"]
    rows = [f"Record `results/records/{rec_name}` ({fig['card']}, {stamp_text(fig)}); GPU time a step by category, ms "
            "(rank 0, `--profile`):", "",
            "| category | " + " | ".join(f"{r['gpus']} GPU(s), `{r['log']}`, {r['profiled_steps']} steps" for r in runs) + " |",
            "| --- |" + " --- |" * len(runs)]
    names = []
    for r in runs:
        names += [c["category"] for c in r["categories"] if c["category"] not in names]
    for name in names:
        cells = []
        for r in runs:
            ms = [c["ms"] for c in r["categories"] if c["category"] == name]
            cells.append(f"{ms[0]:.2f}" if ms else "-")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    rows.append("| total | " + " | ".join(f"{r['total_ms']:.2f}" for r in runs) + " |")
    return "\n".join(rows) + "\n"
