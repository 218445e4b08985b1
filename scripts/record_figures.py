#!/usr/bin/env python3
"""The figures of a result record, computed from its logs, and the pages that quote them.

A record is a dated folder under results/records/ (DATE_NAME), never edited after it lands:
  record.json   {"kind": KIND, "question": "..."}: what the logs are and what they answer;
  command.sh    the commands that made the logs;
  logs/         the logs, each stamped with the commit its binaries were built from;
  figures.json  written by this script from the logs, never by hand.
Kinds:
  default_job   logs/run_*.txt: the logs of `./train_gpt` runs (the README's first command; its
                output, or its --log-file, with run_*.err its standard error beside it). Figures: the card, the commit, runs, runs completed ("train_gpt: done"),
                each failure's error line, the final validation loss and the median step
                (train_gpt's summary line) of each completed run, their least and greatest,
                the peak memory.
  test_gpu      logs/SUITE.txt and logs/SUITE.rc: each make test-gpu suite's output and exit
                code; logs/gpu.txt (nvidia-smi's name of the card) and logs/commit.txt. Figures:
                each suite's exit code and its checks passed and failed (the sum of its
                'NAME: N passed, M failed' lines), the GEMM stress test's cases and repetitions.
  bench_matmul  logs/LABEL_REP.txt: the standard output of bench_matmul runs (LABEL: a build, e.g.
                its short commit; REP: a repetition), logs/LABEL_REP.err beside each its standard
                error; every log opens with its build's stamp 'bench_matmul COMMIT source:DIGEST'.
                Figures: the card and the shape (one of each a record), and for each label its
                commit and source digest (one build a label) and for each product of the tables
                that set a fused product against its parts apart (--mlp-only, --head-only,
                --qkv-only, or the default run's last tables on Hopper) the fused and apart ms of
                every repetition, their least and greatest. The default run's cuBLASLt table is
                not taken. A page's table: each label's fused ms range a product.
A commit that is unknown or "-dirty" (tracked files differed from it) is refused: a record names
the exact code it ran.

A page quotes a record's figures as a table between '<!-- figures: RECORD -->' and
'<!-- /figures -->', which this script writes (--pages) and checks.

    python3 scripts/record_figures.py RECORD_DIR          writes RECORD_DIR/figures.json
    python3 scripts/record_figures.py --check [ROOT]      recomputes every record under ROOT
        (default results/records) and every quoted table in ROOT/../**/*.md, README.md and
        bench/RESULTS.md; exit 1 on any difference, naming the record and the figure
    python3 scripts/record_figures.py --pages [ROOT]      rewrites the quoted tables
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, load_json, regular_file, run  # noqa: E402

PROG = "record_figures"
KINDS = ("default_job", "test_gpu", "bench_matmul")
RESULT_LINE = re.compile(r"^([A-Za-z0-9_.-]+): (\d+) passed, (\d+) failed$")
QUOTE = re.compile(r"^<!-- figures: (\S+) -->\n(.*?)^<!-- /figures -->\n", re.S | re.M)  # markers open their lines


MAX_FILE_BYTES = 64 << 20  # a record's file (a log, a page) is far smaller; a larger one is not read


def read_text(path, what="log"):
    regular_file(path, what)
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise ToolError(f"{path}: the {what} is larger than {MAX_FILE_BYTES >> 20} MiB: not a record's file")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_page(path):
    """A page's text as it is (its line ends kept), or ToolError: a page that is not UTF-8 would
    lose bytes when its quoted tables are rewritten."""
    regular_file(path, "page")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise ToolError(f"{path}: the page is larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise ToolError(f"{path}: the page is not UTF-8 (byte {e.start}): its quoted tables are not rewritten")


NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def number(text, where, name):
    """A figure of a log as a float: a plain decimal, or ToolError naming where and the figure."""
    if not NUMBER.fullmatch(text):
        raise ToolError(f"{where}: {name} {text[:40]!r} is not a number")
    return float(text)


def checked_commit(commit, where):
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit or ""):
        raise ToolError(f"{where}: commit {commit!r} is not a clean commit (unknown, or tracked files differed from it): "
                        "a record names the exact code it ran")
    return commit


def default_job(rec):
    logs = sorted(glob.glob(os.path.join(rec, "logs", "run_*.txt")))
    if not logs:
        raise ToolError(f"{rec}/logs: no run_*.txt log")
    runs, commits, cards, sources = [], set(), set(), set()
    for path in logs:
        text = read_text(path)
        lines = text.splitlines()
        # "run_id:ID train_gpt COMMIT", then " source:DIGEST" where the build stamped the source tree's digest
        m = re.match(r"run_id:\S+ train_gpt (\S+)(?: source:([0-9a-f]{64}))?$", lines[0] if lines else "")
        if not m:
            raise ToolError(f"{path}:1: not a train_gpt log (its first line names the run and the commit)")
        commits.add(checked_commit(m.group(1), f"{path}:1"))
        sources.add(m.group(2))
        card = re.search(r"^train_gpt: (.+?) x (\d+), ", text, re.M)
        if card:
            cards.add(f"{card.group(1)} x {card.group(2)}")
        vals = re.findall(r"^step:(\d+)/(\d+) val_loss:(\S+) ", text, re.M)
        median = re.search(r"^train_gpt: \d+ timed steps: median (\S+) ms a step", text, re.M)
        # one GPU's line, or several GPUs' "... MiB (the largest rank's)"
        peak = re.search(r"^train_gpt: done; peak GPU memory (\d+) MiB(?: \(the largest rank's\))?$", text, re.M)
        err_path = path[:-4] + ".err"  # the run's standard error, where a failure's message goes
        error = re.search(r"^train_gpt: (?:rank \d+: )?error: (.*)$", text + "\n" + (read_text(err_path) if os.path.exists(err_path) else ""),
                          re.M)
        run_ = {"log": os.path.basename(path), "completed": bool(peak)}
        if peak:
            last = vals[-1] if vals else None
            if not last or last[0] != last[1] or not median:
                raise ToolError(f"{path}: a completed run without its last step's validation loss or its summary line")
            if last[2].startswith("diverged(") or last[2].lower() in ("nan", "inf", "-inf"):
                run_.update(completed=False, error=f"final validation loss {last[2]}")
            else:
                run_.update(final_val_loss=number(last[2], path, f"step {last[0]}'s val_loss"),
                            median_step_ms=number(median.group(1), path, "the median step"), peak_mib=int(peak.group(1)))
        else:
            run_["error"] = error.group(1) if error else (lines[-1] if lines else "(empty log)")
        runs.append(run_)
    if len(commits) != 1 or len(cards) != 1:
        raise ToolError(f"{rec}/logs: the runs name {len(commits)} commits and {len(cards)} cards: a record is one code on one card")
    if len(sources) != 1:
        raise ToolError(f"{rec}/logs: the runs name {len(sources)} source digests (or some none): a record is one code")
    done = [r for r in runs if r["completed"]]
    fig = {"kind": "default_job", "commit": commits.pop(), "card": cards.pop(), "runs": len(runs), "completed": len(done),
           "failures": [f"{r['log']}: {r['error']}" for r in runs if not r["completed"]]}
    source = sources.pop()
    if source:  # logs of builds before the digest name none
        fig["source"] = source
    if done:
        vl = [r["final_val_loss"] for r in done]
        ms = sorted(r["median_step_ms"] for r in done)
        fig.update(final_val_loss_min=min(vl), final_val_loss_max=max(vl), median_step_ms_min=ms[0], median_step_ms_max=ms[-1],
                   median_step_ms_median=ms[len(ms) // 2], peak_mib=max(r["peak_mib"] for r in done))
    fig["per_run"] = runs
    return fig


def test_gpu(rec):
    d = os.path.join(rec, "logs")
    commit = checked_commit(read_text(os.path.join(d, "commit.txt"), "commit file").strip(), f"{d}/commit.txt")
    gpu = read_text(os.path.join(d, "gpu.txt"), "card file").strip()
    card = gpu.splitlines()[0].split(",")[0].strip() if gpu else ""
    if not re.fullmatch(r"[ -~]+", card):
        raise ToolError(f"{d}/gpu.txt: {card[:40]!r} is not a card's name (nvidia-smi's name, then its driver)")
    for txt in sorted(glob.glob(os.path.join(d, "*.txt"))):  # every suite's log has its exit code
        name = os.path.basename(txt)[:-4]
        if name not in ("commit", "gpu", "build") and not os.path.exists(os.path.join(d, name + ".rc")):
            raise ToolError(f"{txt}: a suite's log without its exit code ({name}.rc)")
    suites = {}
    for rc_path in sorted(glob.glob(os.path.join(d, "*.rc"))):
        name = os.path.basename(rc_path)[:-3]
        rc_text = read_text(rc_path, "exit code file").strip()
        if not re.fullmatch(r"-?\d+", rc_text):
            raise ToolError(f"{rc_path}: not an exit code: {rc_text[:40]!r}")
        text = read_text(os.path.join(d, name + ".txt"))
        passed = failed = 0
        for line in text.splitlines():
            m = RESULT_LINE.match(line.strip())
            if m:
                passed, failed = passed + int(m.group(2)), failed + int(m.group(3))
        s = {"rc": int(rc_text), "passed": passed, "failed": failed}
        st = re.search(r"^gemm_stress: (\d+) cases, (\d+) repetitions, (\d+) failed, (\S+) s$", text, re.M)
        if st:
            s.update(stress_cases=int(st.group(1)), stress_repetitions=int(st.group(2)),
                     stress_seconds=number(st.group(4), f"{d}/{name}.txt", "the stress test's seconds"))
            if int(st.group(3)):  # (a passing record names no failures)
                s["stress_failed"] = int(st.group(3))
        suites[name] = s
    if not suites:
        raise ToolError(f"{d}: no SUITE.rc file")
    return {"kind": "test_gpu", "commit": commit, "card": card, "suites": suites,
            "all_passed": all(s["rc"] == 0 and s["failed"] == 0 and not s.get("stress_failed") for s in suites.values())}


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
    commit = checked_commit(m.group(1), f"{path}:1")
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


def bench_matmul(rec):
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


def compute(rec):
    meta = load_json(read_text(os.path.join(rec, "record.json"), "record file"), f"{rec}/record.json")
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind not in KINDS:
        raise ToolError(f"{rec}/record.json: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not os.path.exists(os.path.join(rec, "command.sh")):
        raise ToolError(f"{rec}: no command.sh (the commands that made the logs)")
    regular_file(os.path.join(rec, "command.sh"), "command file")
    return {"default_job": default_job, "test_gpu": test_gpu, "bench_matmul": bench_matmul}[kind](rec)


def dump(fig):
    return json.dumps(fig, indent=1, sort_keys=False) + "\n"


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    if fig["kind"] == "bench_matmul":  # one commit a label, not one a record
        rows = [f"Record `results/records/{rec_name}` ({fig['card']}; {fig['shape']}): each product's fused time a call, "
                "least to most over the repetitions", "", "| label | commit | product | fused ms | repetitions |",
                "| --- | --- | --- | --- | --- |"]
        for label, lab in fig["labels"].items():
            for name, p in lab["products"].items():
                rows.append(f"| {label} | {lab['commit']} | {name} | {p['fused_ms_min']:.4f} to {p['fused_ms_max']:.4f} | "
                            f"{len(lab['repetitions'])} |")
        return "\n".join(rows) + "\n"
    rows = [f"Record `results/records/{rec_name}` ({fig['card']}, commit {fig['commit']}):", "", "| figure | value |", "| --- | --- |"]
    if fig["kind"] == "default_job":
        rows.append(f"| runs completed | {fig['completed']} of {fig['runs']} |")
        if fig["completed"]:
            rows.append(f"| final validation loss | {fig['final_val_loss_min']:.4f} to {fig['final_val_loss_max']:.4f} |")
            rows.append(f"| median step | {fig['median_step_ms_min']} to {fig['median_step_ms_max']} ms "
                        f"(median of runs {fig['median_step_ms_median']}) |")
            rows.append(f"| peak GPU memory | {fig['peak_mib']} MiB |")
        rows += [f"| failed | {f} |" for f in fig["failures"]]
    else:
        for name, s in fig["suites"].items():
            extra = f"; {s['stress_cases']} cases, {s['stress_repetitions']} repetitions" if "stress_cases" in s else ""
            rows.append(f"| {name} | exit {s['rc']}, {s['passed']} passed, {s['failed']} failed{extra} |")
    return "\n".join(rows) + "\n"


def pages(root):
    top = os.path.dirname(os.path.dirname(os.path.abspath(root)))  # results/records -> the repository
    found = glob.glob(os.path.join(top, "results", "**", "*.md"), recursive=True)
    return [p for p in found + [os.path.join(top, "README.md"), os.path.join(top, "bench", "RESULTS.md")] if os.path.isfile(p)]


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
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
