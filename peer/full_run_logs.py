#!/usr/bin/env python3
"""Reads the whole-run logs of peer/peer_full_run.sh: LOG_DIR/train_gpt_gN.jsonl and peer_gN.jsonl,
the JSON lines both trainers write beside their text logs.

    python3 peer/full_run_logs.py check LOG_DIR GPUS STEPS TRAIN_PATTERN
    python3 peer/full_run_logs.py table LOG_DIR GPUS STEPS TRAIN_PATTERN

check: a log whose configuration is of another GPU count, step count or training data is named,
exit 2 (so that nothing of another run is moved aside, run over or tabled with these).
table: the same refusal (exit 1), then each finished run's train_time (steps 11 on, validation
excluded, as the record counts it), step average, final validation loss, peak GPU memory and
start-up, and with both runs the ratios train_gpt / peer; then the step of each span between
validations (from the train_time at each validation: the step grows with the window), side by
side; a run that has not finished (no validation at the last step, or no summary) is named and
left out. Every number is read through scripts/tool_errors.py's checked reader: one that is not
a finite number in range (text, NaN, out of range) is refused with its file, line and field named.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import ToolError, field, read_json_lines, run  # noqa: E402

TRAINERS = ("train_gpt", "peer")
MAX_MS = 1e10      # a train_time above this (about 115 days) is no measurement
MAX_STEPS = 10 ** 9
MAX_LOSS = 1e4     # a validation loss is a mean cross-entropy: far below this, finite
MAX_MIB = 1e7      # peak GPU memory, MiB


def read(path, gpus, steps, train):
    """(events, None) for a log of this configuration, or (None, why) for one that is not; a file
    that is not JSON lines of objects is refused (ToolError naming the file and line)."""
    ev = []
    for where, e in read_json_lines(path, "run's JSON lines"):
        if not isinstance(e, dict):
            raise ToolError(f"{where}: not a run's JSON lines (a line that is not an object)")
        ev.append(dict(e, where=where))
    conf = ev[0] if ev and ev[0].get("event") == "config" else {}
    where = conf.get("where", path)
    # the numbers through the checked reader: true would equal 1 and 20.0 would equal 20 below
    got = {"world_size": field(conf, "world_size", where, int, 1, 65536, default=None),
           "steps": field(conf, "steps", where, int, 1, MAX_STEPS, default=None),
           "train_data": field(conf, "train_data", where, str, default=None)}
    want = {"world_size": gpus, "steps": steps, "train_data": train}
    off = [f"{k} {got[k]!r} (want {v!r})" for k, v in want.items() if got[k] != v]
    if off:
        return None, "another configuration's log: " + ", ".join(off) + ": move it, or name another LOG_DIR"
    return ev, None


def row(ev, steps):
    """(train_time s, step average ms, final validation loss, peak MiB, start-up s or None), or
    None for a run that did not finish; a number that is not one (text, NaN, out of range) is
    refused with its file, line and field named."""
    last = [e for e in ev if e.get("event") == "val" and e.get("step") == steps]
    summ = next((e for e in ev if e.get("event") == "summary"), None)
    if not last or summ is None:
        return None
    start = next((field(e, "startup_s", e["where"], float, 0, 1e7) for e in ev if e.get("event") == "startup"), None)
    t = field(last[0], "train_time_ms", last[0]["where"], float, 0, MAX_MS) / 1000
    return (t, 1000 * t / (steps - 10), field(last[0], "val_loss", last[0]["where"], float, 0, MAX_LOSS),
            field(summ, "peak_memory_mib", summ["where"], float, 0, MAX_MIB), start)


def spans(ev):
    """{(first step, last step): ms a step} between consecutive validations, from their train_time
    (the clock starts after step 10, so the first span starts at step 11)."""
    out, prev_step, prev_ms = {}, 10, 0.0
    for e in ev:
        if e.get("event") == "val":
            where = e.get("where", "a validation event")
            s = field(e, "step", where, int, 0, MAX_STEPS)
            if s > 10:
                t = field(e, "train_time_ms", where, float, 0, MAX_MS)
                if s <= prev_step or t < prev_ms:
                    raise ToolError(f"{where}: step {s} at train_time_ms {t:g}, after step {prev_step} at {prev_ms:g}: "
                                    "the validations' steps and times must go up")
                out[(prev_step + 1, s)] = (t - prev_ms) / (s - prev_step)
                prev_step, prev_ms = s, t
    return out


def count(text, name, lo, hi):
    """A whole-number argument in [lo, hi], or the usage error (exit 2) naming it."""
    if not (re.fullmatch(r"[0-9]{1,10}", text) and lo <= int(text) <= hi):  # ASCII digits ('²'.isdigit() is true)
        print(f"peer_full_run: error: {name} {text!r}: want a whole number from {lo} to {hi}", file=sys.stderr)
        sys.exit(2)
    return int(text)


def table(d, gpus, steps, train, mode="table"):
    """(lines, notes, bad) for LOG_DIR d: the table's lines as `table` prints them, the notes it
    prints on standard error (a run left out), and the logs of another configuration, named."""
    rows, bad, notes, span_ms = [], [], [], {}
    for trainer in TRAINERS:
        path = os.path.join(d, f"{trainer}_g{gpus}.jsonl")
        if not os.path.lexists(path):  # not run yet; anything else there is read, and refused unless a regular file
            continue
        ev, why = read(path, gpus, steps, train)
        if why:
            bad.append(f"{path}: {why}")
        elif mode == "table":
            r = row(ev, steps)
            if r is None:
                notes.append(f"{path}: the run did not finish (no validation at step {steps} or no summary): left out")
            else:
                rows.append((trainer,) + r)
                span_ms[trainer] = spans(ev)
    if bad or mode == "check" or not rows:
        return [], notes, bad
    out = [f"{gpus} GPU(s), {steps} steps:",
           f"{'run':<10} {'train_time s':>13} {'step_avg ms':>12} {'final val':>10} {'peak MiB':>9} {'start-up s':>11}"]
    for name, t, avg, val, mem, start in rows:
        out.append(f"{name:<10} {t:>13.1f} {avg:>12.2f} {val:>10.4f} {mem:>9.0f} {'-' if start is None else f'{start:.1f}':>11}")
    if len(rows) == 2:
        (_, t1, _, _, m1, _), (_, t2, _, _, m2, _) = rows
        ratio = lambda x, y: f"{x / y:.3f}" if y > 0 else "n/a (0 in the peer's log)"  # noqa: E731
        out.append(f"train_gpt / peer: train_time {ratio(t1, t2)}, peak memory {ratio(m1, m2)}")
    names = [name for name in TRAINERS if span_ms.get(name)]
    keys = sorted(set().union(*(span_ms[n] for n in names))) if names else []
    if keys:
        both = len(names) == 2
        out.append("ms a step between validations:")
        out.append(f"{'steps':<11}" + "".join(f" {n:>10}" for n in names) + (f" {'train_gpt / peer':>17}" if both else ""))
        for k in keys:
            cells = [span_ms[n].get(k) for n in names]
            line = f"{k[0]}-{k[1]:<{10 - len(str(k[0]))}}" + "".join(f" {c:>10.2f}" if c is not None else f" {'-':>10}" for c in cells)
            if both and None not in cells and cells[1] > 0:
                line += f" {cells[0] / cells[1]:>17.3f}"
            out.append(line)
    return out, notes, bad


def main(argv):
    if len(argv) != 5 or argv[0] not in ("check", "table"):
        print("usage: full_run_logs.py check|table LOG_DIR GPUS STEPS TRAIN_PATTERN", file=sys.stderr)
        return 2
    mode, d, train = argv[0], argv[1], argv[4]
    gpus, steps = count(argv[2], "GPUS", 1, 65536), count(argv[3], "STEPS", 11, MAX_STEPS)
    if os.path.lexists(d) and not os.path.isdir(d):
        raise ToolError(f"LOG_DIR {d}: exists and is not a folder")
    lines, notes, bad = table(d, gpus, steps, train, mode)
    for n in notes:
        print(f"peer_full_run: {n}", file=sys.stderr)
    for b in bad:
        print(f"peer_full_run: {b}", file=sys.stderr)
    if bad:
        return 2 if mode == "check" else 1
    if mode == "check":
        return 0
    if not lines:
        print(f"peer_full_run: {d} holds no finished run on {gpus} GPU(s)", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "peer_full_run")
