#!/usr/bin/env python3
"""Parses speedrun logs: this trainer's and modded-nanogpt's (formats of 2024-11-24 and
2024-12-10), one line per step in the record's form

    step:N/M val_loss:X train_time:Tms step_avg:Sms
    step:N/M train_time:Tms step_avg:Sms                  (2024-12-10)
    step:N/M train_loss:X train_time:Tms step_avg:Sms     (2024-11-24)

Other lines (environment, nvidia-smi, code dumps) are skipped. When a JSON-lines file sits beside
the log (LOG.jsonl, or the log's name with .txt replaced by .jsonl) its first object is taken as
the run's configuration (this trainer writes one: flags, seed, world size, git commit, run id).

A log holds one run. One that holds more (two logs put together, or a run appended to another)
is refused with LogError rather than read as one run: train_gpt names its run in the first line
(run_id:ID) and in the configuration, and in any log the step numbers only go up.

    python3 scripts/speedrun_logs.py LOG... > steps.csv      # every step of every log, as CSV
"""
import csv
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, regular_file, run as run_tool  # noqa: E402

STEP_RE = re.compile(r"^step:(\d+)/(\d+)\s+(.*)$")
RUN_ID_RE = re.compile(r"^run_id:(\S+)")


class LogError(ToolError, ValueError):
    """A log that cannot be read as one run."""
FIELD_RE = re.compile(r"(\w+):(\S+)")


def _num(text):
    text = text.rstrip("ms") if text.endswith("ms") else text
    try:
        return float(text)
    except ValueError:
        return math.nan


@dataclass
class Run:
    path: str
    total_steps: int = 0
    train: list = field(default_factory=list)  # (step, train_time_ms, step_avg_ms, train_loss or nan)
    val: list = field(default_factory=list)    # (step, val_loss, train_time_ms)
    config: dict = field(default_factory=dict)
    peak_memory_mib: float = math.nan
    run_id: str = ""
    times_from_json: bool = False  # training times to the microsecond, from the JSON lines

    @property
    def complete(self):
        """The run reached its last step and validated there."""
        return bool(self.val) and self.total_steps > 0 and self.val[-1][0] == self.total_steps

    @property
    def final_val_loss(self):
        return self.val[-1][1] if self.val else math.nan

    @property
    def train_time_ms(self):
        """Training time at the last step (validation excluded, as the record counts it)."""
        return self.train[-1][1] if self.train else math.nan

    @property
    def step_avg_ms(self):
        return self.train[-1][2] if self.train else math.nan

    def step_times_ms(self, skip=10):
        """Durations of single steps from consecutive train_time values, after the first `skip`."""
        t = [(s, tt) for s, tt, _, _ in self.train if s > skip]
        return [b[1] - a[1] for a, b in zip(t, t[1:]) if b[0] == a[0] + 1]


def parse(path):
    regular_file(path, "log")
    run = Run(path=path)
    last = {"train": -1, "val": -1}
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            m = RUN_ID_RE.match(line)
            if m:
                if run.run_id and m.group(1) != run.run_id:
                    raise LogError(f"{path}:{lineno}: a second run (run_id {m.group(1)} after {run.run_id}): "
                                   "the file holds more than one run; give each run a log of its own")
                run.run_id = m.group(1)
                continue
            if line.startswith("peak memory"):
                m = re.search(r"(\d+(?:\.\d+)?)\s*MiB", line)
                if m:
                    run.peak_memory_mib = float(m.group(1))
                continue
            m = STEP_RE.match(line)
            if not m:
                continue
            step, total = int(m.group(1)), int(m.group(2))
            fields = dict(FIELD_RE.findall(m.group(3)))
            if "train_time" not in fields:
                continue
            kind = "val" if "val_loss" in fields else "train"
            if step <= last[kind] or (run.total_steps and total != run.total_steps):
                raise LogError(f"{path}:{lineno}: step {step}/{total} after step {last[kind]}/{run.total_steps}: "
                               "the file holds more than one run; give each run a log of its own")
            last[kind] = step
            run.total_steps = total
            tt = _num(fields["train_time"])
            if kind == "val":
                run.val.append((step, _num(fields["val_loss"]), tt))
            else:
                run.train.append((step, tt, _num(fields.get("step_avg", "nan")), _num(fields.get("train_loss", "nan"))))
    for side in (path + "l" if path.endswith(".json") else None, os.path.splitext(path)[0] + ".jsonl", path + ".jsonl"):
        if side and os.path.exists(side):
            regular_file(side, "JSON-lines log")
            configs = []
            with open(side, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        ev = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise LogError(f"{side}:{lineno}: not JSON ({e})")
                    if lineno == 1 or (isinstance(ev, dict) and ev.get("event") == "config"):
                        configs.append(ev if isinstance(ev, dict) else {})
            if len(configs) > 1:
                raise LogError(f"{side}: {len(configs)} configuration lines: the file holds more than one run")
            _times_from_json(run, side)
            run.config = configs[0] if configs else {}
            cid = run.config.get("run_id")
            if cid and run.run_id and cid != run.run_id:
                raise LogError(f"{side}: run_id {cid} is not the run of {path} ({run.run_id})")
            break
    return run


def _times_from_json(run, side):
    """The text log prints whole milliseconds; train_gpt's JSON lines hold the same times to the
    microsecond. Where they do, the training times and step averages are taken from them, so that
    single step times (differences of consecutive train_time values) are not rounded."""
    times = {}
    with open(side, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(ev, dict) and ev.get("event") == "step" and isinstance(ev.get("train_time_ms"), (int, float)):
                times[ev.get("step")] = float(ev["train_time_ms"])
    if not times or any(s not in times or abs(times[s] - tt) > 1.0 for s, tt, _, _ in run.train if not math.isnan(tt)):
        return  # no times there, or not this log's: keep the printed ones
    run.train = [(s, times[s], times[s] / (s - 10) if s > 10 else avg, loss) for s, tt, avg, loss in run.train]
    run.times_from_json = True


def write_csv(runs, out):
    w = csv.writer(out)
    w.writerow(["file", "step", "total_steps", "kind", "val_loss", "train_loss", "train_time_ms", "step_avg_ms"])
    for r in runs:
        for s, tt, avg, tl in r.train:
            w.writerow([r.path, s, r.total_steps, "train", "", "" if math.isnan(tl) else tl, tt, "" if math.isnan(avg) else avg])
        for s, vl, tt in r.val:
            w.writerow([r.path, s, r.total_steps, "val", vl, "", tt, ""])


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    runs = []
    for p in argv:
        r = parse(p)
        if not r.train and not r.val:
            raise LogError(f"{p}: no step lines: not a speedrun log (or the run stopped before its first step)")
        runs.append(r)
    write_csv(runs, sys.stdout)
    return 0


if __name__ == "__main__":
    run_tool(lambda: main(sys.argv[1:]), "speedrun_logs")
