"""Record kind bench_matmul: logs/LABEL_REP.txt: the standard output of bench_matmul runs (LABEL: a
build, e.g. its short commit; REP: a repetition), logs/LABEL_REP.err beside each its standard error;
every log opens with its build's stamp 'bench_matmul COMMIT source:DIGEST'. Figures: the card and
the shape (one of each a record), and for each label its commit and source digest (one build a
label) and for each product of the tables that set a fused product against its parts apart
(--mlp-only, --head-only, --qkv-only, or the default run's last tables on Hopper) the fused and
apart ms of every repetition, their least and greatest. The default run's cuBLASLt table is not
taken. A page's table: each label's fused ms range a product.
"""
import glob
import os
import re

from tool_errors import ToolError
from record_kinds.common import known_commit, number, read_text

KIND = "bench_matmul"


BENCH_LOG = re.compile(r"^(.+)_(\d+)\.txt$")  # NAME_REP.txt: the label (a build), the repetition


def bench_log(path):
    """One bench_matmul log: (commit, source, card, shape, {product: (apart ms, fused ms)}), or
    ToolError naming the file and line. Its products are the rows of the tables that set a fused
    product against its parts apart (a header 'product ... apart ms ... | fused ms ...', then rows
    'NAME apart TFLOP/s ms/step | fused TFLOP/s ms/step | ...' up to the first other line)."""
    lines = read_text(path).splitlines()
    # "bench_matmul COMMIT source:DIGEST", the build's commit and source digest (build/version.cpp)
    m = re.fullmatch(r"bench_matmul (\S+) source:(\S+)", lines[0] if lines else "")
    if not m:
        raise ToolError(f"{path}:1: not a stamped bench_matmul log (its first line names the build: "
                        "'bench_matmul COMMIT source:DIGEST')")
    commit = known_commit(m.group(1), f"{path}:1", path)
    if not re.fullmatch(r"[0-9a-f]{64}", m.group(2)):
        raise ToolError(f"{path}:1: source digest {m.group(2)[:70]!r} is not 64 hex digits")
    card = shape = None
    products, in_table = {}, False
    for n, line in enumerate(lines[1:], 2):
        where = f"{path}:{n}"
        d = re.fullmatch(r"device: ([ -~]+?); (.+)", line)
        if d:
            if card is not None:
                raise ToolError(f"{where}: a second device line: a log is one run")
            card, shape = d.group(1), d.group(2)
            continue
        if re.match(r"product\s.*\bapart ms\b.*\|\s*fused ms\b", line):
            in_table = True
            continue
        if not in_table:
            continue
        parts = line.split("|")
        if len(parts) != 3:
            in_table = False  # the table's end
            continue
        left, right = parts[0].split(), parts[1].split()
        if len(left) < 4 or len(right) != 3:
            raise ToolError(f"{where}: not a row of the fused-vs-apart table (NAME ms TFLOP/s ms/step | ms TFLOP/s ms/step | ...)")
        name = " ".join(left[:-3])
        if name in products:
            raise ToolError(f"{where}: product {name!r} a second time: a log is one run")
        products[name] = (number(left[-3], where, f"the apart ms of {name!r}"), number(right[0], where, f"the fused ms of {name!r}"))
    if card is None:
        raise ToolError(f"{path}: no 'device: CARD; SHAPE' line")
    if not products:
        err_path = path[:-4] + ".err"  # the run's standard error, where a failure's message goes
        err = read_text(err_path).strip().splitlines() if os.path.exists(err_path) else []
        raise ToolError(f"{path}: no row of a fused-vs-apart table (a run that failed, or one off Hopper, where "
                        "bench_matmul prints none)" + (f"; its standard error ends: {err[-1][:200]}" if err else ""))
    return commit, m.group(2), card, shape, products


def compute(rec, meta):
    paths = sorted(glob.glob(os.path.join(rec, "logs", "*.txt")))
    if not paths:
        raise ToolError(f"{rec}/logs: no NAME_REP.txt log")
    runs = {}  # label -> [(rep, path, parsed)]
    for path in paths:
        m = BENCH_LOG.match(os.path.basename(path))
        if not m or not re.fullmatch(r"[A-Za-z0-9.+-]+", m.group(1)):
            raise ToolError(f"{path}: not a log's name: NAME_REP.txt (NAME: letters, digits, '.', '+', '-'; REP: a repetition)")
        runs.setdefault(m.group(1), []).append((int(m.group(2)), path, bench_log(path)))
    cards = {p[2] for reps in runs.values() for _, _, p in reps}
    shapes = {p[3] for reps in runs.values() for _, _, p in reps}
    if len(cards) != 1 or len(shapes) != 1:
        raise ToolError(f"{rec}/logs: the logs name {len(cards)} cards and {len(shapes)} shapes: a record is one card "
                        "and one shape (the same flags)")
    labels = {}
    for label in sorted(runs):
        reps = sorted(runs[label], key=lambda r: r[0])
        if len({r[0] for r in reps}) != len(reps):
            raise ToolError(f"{rec}/logs: label {label} has one repetition twice (NAME_REP.txt with REP written two ways)")
        builds = {(p[0], p[1]) for _, _, p in reps}
        if len(builds) != 1:
            raise ToolError(f"{rec}/logs: label {label}'s logs name {len(builds)} builds (commit and source digest): "
                            "a label is one build")
        names = list(reps[0][2][4])
        for _, path, p in reps[1:]:
            if list(p[4]) != names:
                raise ToolError(f"{path}: products {list(p[4])} differ from {os.path.basename(reps[0][1])}'s {names}: "
                                "a label's repetitions are one command")
        commit, source = builds.pop()
        products = {}
        for name in names:
            apart = [p[4][name][0] for _, _, p in reps]
            fused = [p[4][name][1] for _, _, p in reps]
            products[name] = {"apart_ms": apart, "fused_ms": fused, "apart_ms_min": min(apart), "apart_ms_max": max(apart),
                              "fused_ms_min": min(fused), "fused_ms_max": max(fused)}
        labels[label] = {"commit": commit, "source": source, "repetitions": [r[0] for r in reps], "products": products}
    return {"kind": "bench_matmul", "card": cards.pop(), "shape": shapes.pop(), "labels": labels}


def table(rec_name, fig):
    """The markdown table a page quotes for a record: one commit a label, not one a record."""
    rows = [f"Record `results/records/{rec_name}` ({fig['card']}; {fig['shape']}): each product's fused time a call, "
            "least to most over the repetitions", "", "| label | commit | product | fused ms | repetitions |",
            "| --- | --- | --- | --- | --- |"]
    for label, lab in fig["labels"].items():
        for name, p in lab["products"].items():
            rows.append(f"| {label} | {lab['commit']} | {name} | {p['fused_ms_min']:.4f} to {p['fused_ms_max']:.4f} | "
                        f"{len(lab['repetitions'])} |")
    return "\n".join(rows) + "\n"
