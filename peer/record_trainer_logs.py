#!/usr/bin/env python3
"""Reads the log of a modded-nanogpt record trainer (the log peer/record_trainer.sh copies to
OUT/log.txt, or a record's own log) into the figures the peer's logs give: the median step over
the steps a comparison names, the training time and step average at the last step, the
validation losses by step (with the mean step of each span between validations, steps 11 on),
and the peak memory where the log prints it.

    python3 peer/record_trainer_logs.py LOG [--steps FIRST-LAST]

The lines read are those after the log's first line of 100 '=' (above it, a record's log holds the
trainer's code), in the records' form:

    step:N/M val_loss:X train_time:Tms step_avg:Sms
    step:N/M train_time:Tms step_avg:Sms
    step:N/M train_loss:X train_time:Tms step_avg:Sms
    peak memory consumption: N MiB                       (2024)
    peak memory allocated: N MiB reserved: R MiB         (2025)

Any other line is skipped, but a line that begins with "step:" or "peak memory" and is not in one
of these forms is refused with the file and line named, as is one whose numbers are out of range
(a time that is not finite, a step past the run's last), whose total M differs from the log's
first, or whose step does not go up (two runs in one file). A loss the trainer printed as nan or
inf is read as such and named as a divergence.

The time of step s is train_time(s) - train_time(s-1); where train_time goes down from one step to
the next, the trainer restarted its clock (the 2024 records set it to 0 before step 11), and the
step's time is its train_time. The log prints train_time to the millisecond, so a step's time is
within 1 ms and the median is a whole or half millisecond; the mean over a span (its time over its
steps) is within 1 ms / the span's length. --steps names the steps whose times the median covers (default 11
to the last, the steps the record times); each of them, and the step before it, must be in the log.
Exit status: 0, 1 for a log that cannot be read, 2 for bad flags.
"""
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import ToolError, bounded_lines, regular_file, run  # noqa: E402

SEPARATOR = "=" * 100
MAX_LINE = 1 << 16          # a step line is under 100 characters; a longer line is skipped unread
MAX_STEPS = 10 ** 9
MAX_MS = 1e10               # a train_time above this (about 115 days) is no measurement
MAX_MIB = 1e7
NUM = r"(\d{1,12}(?:\.\d{1,9})?)"
LOSS = r"(\d{1,6}\.\d{1,9}|nan|inf|-inf)"
STEP_RE = re.compile(r"step:(\d{1,10})/(\d{1,10}) (?:(val_loss|train_loss):" + LOSS + r" )?train_time:" + NUM +
                     r"ms step_avg:(" + NUM[1:-1] + r"|nan|inf)ms")
PEAK_RE = re.compile(r"peak memory (?:consumption|allocated): (\d{1,12}) MiB(?: reserved: (\d{1,12}) MiB)?")
FIRST_STEP = 11             # the first step the records time


def usage(msg):
    print(f"record_trainer_logs: error: {msg}", file=sys.stderr)
    print("usage: python3 peer/record_trainer_logs.py LOG [--steps FIRST-LAST]", file=sys.stderr)
    sys.exit(2)


def parse(path):
    """{'total', 'train': [(step, ms, loss or None)], 'val': [(step, loss, ms)], 'peak', 'reserved',
    'where': {step: PATH:LINE}}; ToolError naming the file and line for a malformed line."""
    regular_file(path, "log")
    log = {"total": None, "train": [], "val": [], "peak": None, "reserved": None, "where": {}}
    started = False
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = list(bounded_lines(f, MAX_LINE))
    if not any(line.rstrip("\r\n") == SEPARATOR for _, line, _ in lines):
        started = True  # a log without the code at its top: every line is read
    for lineno, line, too_long in lines:
        where = f"{path}:{lineno}"
        text = line.rstrip("\r\n")
        if not started:
            started = text == SEPARATOR
            continue
        if too_long:
            if text.startswith(("step:", "peak memory")):
                raise ToolError(f"{where}: a line of more than {MAX_LINE >> 10} KiB that begins like a step line")
            continue
        if text.startswith("peak memory"):
            m = PEAK_RE.fullmatch(text)
            if not m:
                raise ToolError(f"{where}: a peak-memory line not in the records' form ('peak memory allocated: N MiB "
                                f"reserved: R MiB'): {text[:80]!r}")
            if log["peak"] is not None:
                raise ToolError(f"{where}: a second peak-memory line: the file holds more than one run")
            log["peak"] = float(m.group(1))
            log["reserved"] = float(m.group(2)) if m.group(2) else None
            if log["peak"] > MAX_MIB:
                raise ToolError(f"{where}: a peak memory of {m.group(1)} MiB, beyond {MAX_MIB:.0e}")
            continue
        if not text.startswith("step:"):
            continue
        m = STEP_RE.fullmatch(text)
        if not m:
            raise ToolError(f"{where}: a step line not in the records' form ('step:N/M [val_loss:X |train_loss:X ]"
                            f"train_time:Tms step_avg:Sms'): {text[:80]!r}")
        step, total, kind, loss, ms = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), float(m.group(5))
        if total < 1 or total > MAX_STEPS:
            raise ToolError(f"{where}: a run of {total} steps: want 1 to {MAX_STEPS}")
        if step > total:
            raise ToolError(f"{where}: step {step}/{total}: a step past the run's last")
        if log["total"] is not None and total != log["total"]:
            raise ToolError(f"{where}: step {step}/{total} in a log of {log['total']} steps: the file holds more than one run")
        log["total"] = total
        if not ms <= MAX_MS:
            raise ToolError(f"{where}: a train_time of {m.group(5)} ms, beyond {MAX_MS:.0e}")
        loss = float(loss) if loss is not None else None
        if kind == "val_loss":
            if log["val"] and step <= log["val"][-1][0]:
                raise ToolError(f"{where}: a validation at step {step} after one at step {log['val'][-1][0]}: "
                                "the file holds more than one run")
            log["val"].append((step, loss, ms))
        else:
            if log["train"] and step <= log["train"][-1][0]:
                raise ToolError(f"{where}: step {step} after step {log['train'][-1][0]}: the file holds more than one run")
            log["train"].append((step, ms, loss))
            log["where"][step] = where
    if not log["train"] and not log["val"]:
        raise ToolError(f"{path}: no step line ('step:N/M ... train_time:Tms step_avg:Sms'): not a record trainer's log")
    return log


def step_times(log, first, last):
    """{step: ms} for steps first..last, each from its train_time and the step before it's."""
    ms = {s: t for s, t, _ in log["train"]}
    out = {}
    for s in range(first, last + 1):
        if s not in ms or s - 1 not in ms:
            gone = s if s not in ms else s - 1
            raise ToolError(f"{log['path']}: step {gone} is not in the log, which the time of step {s} needs "
                            f"(--steps {first}-{last})")
        out[s] = ms[s] - ms[s - 1] if ms[s] >= ms[s - 1] else ms[s]
    return out


def report(log, first, last):
    out = []
    total, train, val = log["total"], log["train"], log["val"]
    done = bool(train) and train[-1][0] == total and bool(val) and val[-1][0] == total
    state = "complete" if done else f"stopped at step {train[-1][0] if train else 0}"
    out.append(f"{log['path']}: a run of {total} steps, {state}")
    diverged = [(s, k, x) for s, x, _ in val for k in ["val_loss"] if not math.isfinite(x)] + \
               [(s, "train_loss", x) for s, _, x in train if x is not None and not math.isfinite(x)]
    if diverged:
        s, k, x = min(diverged)
        out.append(f"diverged: {k} {x} at step {s}")
    if first <= last:
        times = step_times(log, first, last)
        out.append(f"median step: {statistics.median(times.values()):.2f} ms over steps {first}-{last} ({len(times)} steps)")
    if train:
        s, ms, _ = train[-1]
        out.append(f"train_time at step {s}: {ms / 1000:.3f} s (as the log prints it)")
        if s >= FIRST_STEP:
            span = step_times(log, FIRST_STEP, s)
            out.append(f"mean step over steps {FIRST_STEP}-{s}: {sum(span.values()) / len(span):.2f} ms")
    if val:
        out.append(f"final validation loss: {val[-1][1]:.4f} at step {val[-1][0]}")
    if log["peak"] is not None:
        out.append(f"peak memory: {log['peak']:.0f} MiB" +
                   (f" (reserved {log['reserved']:.0f} MiB)" if log["reserved"] is not None else ""))
    else:
        out.append("peak memory: not in the log")
    if val:
        ms = {st: t for st, t, _ in train}
        each = {st: ms[st] - ms[st - 1] if ms[st] >= ms[st - 1] else ms[st]
                for st in ms if st >= FIRST_STEP and st - 1 in ms}
        out.append("validations:")
        out.append(f"{'step':>7} {'val_loss':>9} {'train_time ms':>14} {'steps':>11} {'ms a step':>10}")
        prev = FIRST_STEP - 1
        for st, x, t in val:
            span = [each[k] for k in range(prev + 1, st + 1) if k in each]
            if st > prev and len(span) == st - prev:
                cells = f"{f'{prev + 1}-{st}':>11} {sum(span) / len(span):>10.2f}"
                prev = st
            else:
                cells = f"{'-':>11} {'-':>10}"
            out.append(f"{st:>7} {x:>9.4f} {t:>14.0f} {cells}")
    return out


def main(argv):
    path, steps = None, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--steps":
            if i + 1 >= len(argv):
                usage("--steps needs FIRST-LAST")
            steps = argv[i + 1]
            i += 2
            continue
        if a.startswith("-"):
            usage(f"unknown flag {a!r}")
        if path is not None:
            usage(f"one log at a time (got {path!r} and {a!r})")
        path = a
        i += 1
    if path is None:
        usage("no LOG given")
    rng = None
    if steps is not None:
        m = re.fullmatch(r"(\d{1,10})-(\d{1,10})", steps)
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            usage(f"--steps {steps!r}: want FIRST-LAST, whole numbers with 1 <= FIRST <= LAST")
        rng = int(m.group(1)), int(m.group(2))
    log = parse(path)
    log["path"] = path
    last_train = log["train"][-1][0] if log["train"] else 0
    if rng is None:
        rng = (FIRST_STEP, last_train)
    elif rng[1] > log["total"]:
        usage(f"--steps {steps}: past the run's last step, {log['total']}")
    print("\n".join(report(log, *rng)))
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "record_trainer_logs")
