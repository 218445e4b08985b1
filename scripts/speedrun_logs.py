#!/usr/bin/env python3
"""Parses speedrun logs: this trainer's and modded-nanogpt's (formats of 2024-11-24 and
2024-12-10), one line per step in the record's form

    step:N/M val_loss:X train_time:Tms step_avg:Sms
    step:N/M train_time:Tms step_avg:Sms                  (2024-12-10)
    step:N/M train_loss:X train_time:Tms step_avg:Sms     (2024-11-24)

Other lines (environment, nvidia-smi, code dumps) are skipped; a line longer than 64 KiB is
skipped without being read whole (no step line is near that long), and every line is read in
time linear in its length. When a JSON-lines file sits beside the log (LOG.jsonl, or the log's
name with .txt replaced by .jsonl) its first object is taken as the run's configuration (this
trainer writes one: flags, seed, world size, git commit, run id).

A log holds one run. One that holds more (two logs put together, or a run appended to another)
is refused with LogError rather than read as one run: train_gpt names its run in the first line
(run_id:ID) and in the configuration, and in any log the step numbers only go up. The JSON lines
must be the same run's as the text log: the same run id (both or neither), the same steps, and
the same losses and times to the text's printed precision; JSON lines of another run are refused,
never used in the text log's place.

A loss is a number, or diverged: train_gpt writes a loss that is not finite as diverged(nan),
diverged(inf) or diverged(-inf) in both files (and stops the run there), read as a Diverged (a
float of that value); a step line without a loss gives None, never a number.

A run is complete when its log holds every training step 1..N and a validation at step N (N
being the steps it was started for); Run.state() says what else it is (diverged, stopped early,
a step missing, begun past step 1).

    python3 scripts/speedrun_logs.py LOG... > steps.csv      # every step of every log, as CSV
"""
import argparse
import csv
import math
import os
import re
import sys
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, bounded_lines, load_json, regular_file, run as run_tool  # noqa: E402

MAX_LINE = 1 << 16        # a text line longer than this is not a step line: skipped unread
MAX_JSON_LINE = 1 << 20   # train_gpt's JSON lines are under 2 KB; a longer one is not its
# anchored, with bounded repeats: linear in the line's length (no backtracking over long lines)
STEP_RE = re.compile(r"step:(\d{1,9})/(\d{1,9})(?:\s|$)")
RUN_ID_RE = re.compile(r"run_id:(\S+)")
KEY_RE = re.compile(r"\w+")
MIB_RE = re.compile(r"(?<![\d.])(\d{1,12}(?:\.\d{1,12})?)[ \t]{0,8}MiB")
TEXT_LOSS_TOL = 0.5e-4 + 1e-9   # the text prints losses with %.4f
TEXT_TIME_TOL = 0.5 + 1e-3      # the text prints train_time with %.0f, the JSON lines with %.3f


class LogError(ToolError, ValueError):
    """A log that cannot be read as one run."""


class Diverged(float):
    """A loss that the log records as diverged: its value (nan, inf or -inf), shown as train_gpt
    writes it, diverged(nan). A loss the log does not hold is None, never a Diverged."""

    def __new__(cls, value):
        return super().__new__(cls, value)

    def __repr__(self):
        return f"diverged({'nan' if math.isnan(self) else 'inf' if self > 0 else '-inf'})"

    __str__ = __repr__


DIVERGED = {"diverged(nan)": Diverged(math.nan), "diverged(inf)": Diverged(math.inf), "diverged(-inf)": Diverged(-math.inf)}


def _num(text):
    """A time of the text log (nan if it is no number: step_avg is nan before step 11)."""
    text = text[:-2] if text.endswith("ms") else text
    try:
        return float(text)
    except ValueError:
        return math.nan


def _loss(text, where):
    """A loss of the text log: None when the line holds none; a Diverged for train_gpt's
    diverged(nan|inf|-inf) and for any other value that is not finite (earlier trainers printed
    inf); a LogError, naming where, for a value that is no number."""
    if text is None:
        return None
    if text in DIVERGED:
        return DIVERGED[text]
    try:
        x = float(text)
    except ValueError:
        raise LogError(f"{where}: a loss of {text[:40]!r}, which is no number") from None
    return x if math.isfinite(x) else Diverged(x)


def _jnum(v):
    """A time of the JSON lines (null is nan); None if not a number."""
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _jloss(v):
    """A loss of the JSON lines: train_gpt writes a diverged one as the string diverged(nan),
    diverged(inf) or diverged(-inf), a Diverged here, as is null (earlier trainers wrote a loss
    that was not finite as null); None if it is no number."""
    if v is None:
        return Diverged(math.nan)
    if isinstance(v, str):
        return DIVERGED.get(v)
    x = _jnum(v)
    return x if x is None or math.isfinite(x) else Diverged(x)


def _fields(rest):
    """'key:value' words of a step line, split on white space (linear; a value may hold ':')."""
    out = {}
    for word in rest.split():
        key, sep, value = word.partition(":")
        if sep and KEY_RE.fullmatch(key) and value:
            out.setdefault(key, value)
    return out


def _same(a, b, tol):
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol  # (inf - inf is nan)


def _same_loss(text, json, tol):
    """Whether a loss of the text log and of the JSON lines agree: diverged in both alike, or
    numbers within the text's rounding (either absent: nothing to compare)."""
    if text is None or json is None:
        return True
    if isinstance(text, Diverged) or isinstance(json, Diverged):
        return isinstance(text, Diverged) and isinstance(json, Diverged) and repr(text) == repr(json)
    return _same(text, json, tol)


@dataclass
class Run:
    path: str
    total_steps: int = 0
    # losses: a float, a Diverged (logged as diverged), or None (train_loss: the line holds none)
    train: list = field(default_factory=list)  # (step, train_time_ms, step_avg_ms, train_loss)
    val: list = field(default_factory=list)    # (step, val_loss, train_time_ms)
    config: dict = field(default_factory=dict)
    peak_memory_mib: float = math.nan
    run_id: str = ""
    times_from_json: bool = False  # training times to the microsecond, from the JSON lines
    json_path: str = ""            # the JSON-lines file read with the log ("" if none)
    json_losses: list = field(default_factory=list)  # (step, "train_loss"/"val_loss", value) at full precision

    @property
    def seed(self):
        """The seed of the configuration (None when the log records none)."""
        s = self.config.get("seed")
        return s if isinstance(s, int) and not isinstance(s, bool) else None

    @property
    def world_size(self):
        w = self.config.get("world_size")
        return w if isinstance(w, int) and not isinstance(w, bool) else None

    @property
    def diverged(self):
        """The first loss the log records as diverged, as (step, 'train_loss' or 'val_loss',
        Diverged); None when every logged loss is finite."""
        losses = [(s, "val_loss", v) for s, v, _ in self.val] + [(s, "train_loss", l) for s, _, _, l in self.train]
        bad = [x for x in losses if isinstance(x[2], Diverged)]
        return min(bad, key=lambda x: (x[0], x[1] == "val_loss")) if bad else None

    def state(self):
        """('complete', '') when every training step 1..N is logged and step N validated;
        ('diverged', what) when its steps run from 1 without a gap to a loss logged as diverged
        (train_gpt stops there); else ('incomplete', why): stopped early, a step missing, begun
        past step 1, no step at all."""
        n = self.total_steps
        steps = [s for s, _, _, _ in self.train]
        if steps and steps[0] != 1:
            return "incomplete", f"begins at step {steps[0]} of {n}, not at step 1 (a resumed run?)"
        for i, s in enumerate(steps, 1):
            if s != i:
                return "incomplete", f"step {i} of {n} is missing (the log jumps from step {i - 1} to {s})"
        if self.diverged:  # (at any step: the validation at step 0 comes before the first training step)
            s, key, v = self.diverged
            return "diverged", f"{key} {v!r} at step {s} of {n}"
        if not n or not steps:
            return "incomplete", "no training step logged"
        if steps[-1] != n:
            return "incomplete", f"stopped at step {steps[-1]} of {n}"
        if not self.val or self.val[-1][0] != n:
            return "incomplete", f"no validation at its last step {n}"
        return "complete", ""

    @property
    def complete(self):
        """The run logged every step 1..N and validated at step N."""
        return self.state()[0] == "complete"

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

    def loss_sequence(self):
        """The losses to compare bit for bit: full precision from the JSON lines when the trainer
        wrote them (exact_losses), else the printed values."""
        if self.json_losses:
            return list(self.json_losses)
        return [(s, "val_loss", repr(v) if isinstance(v, Diverged) else v) for s, v, _ in self.val] + \
               [(s, "train_loss", repr(l) if isinstance(l, Diverged) else l) for s, _, _, l in self.train if l is not None]

    @property
    def exact_losses(self):
        """Whether loss_sequence() holds the losses as computed (the JSON lines'), not as printed."""
        return bool(self.json_losses)


def parse(path):
    regular_file(path, "log")
    run = Run(path=path)
    last = {"train": -1, "val": -1}
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line, too_long in bounded_lines(f, MAX_LINE):
            if too_long:
                if line.startswith(("step:", "run_id:")):
                    raise LogError(f"{path}:{lineno}: a line of more than {MAX_LINE // 1024} KiB that begins like a "
                                   "step line: not a speedrun log")
                continue
            line = line.strip()
            m = RUN_ID_RE.match(line)
            if m:
                if run.run_id and m.group(1) != run.run_id:
                    raise LogError(f"{path}:{lineno}: a second run (run_id {m.group(1)} after {run.run_id}): "
                                   "the file holds more than one run; give each run a log of its own")
                run.run_id = m.group(1)
                continue
            if line.startswith("peak memory"):
                m = MIB_RE.search(line)
                if m:
                    run.peak_memory_mib = float(m.group(1))
                continue
            m = STEP_RE.match(line)
            if not m:
                continue
            step, total = int(m.group(1)), int(m.group(2))
            fields = _fields(line[m.end():])
            if "train_time" not in fields:
                continue
            kind = "val" if "val_loss" in fields else "train"
            if step <= last[kind] or (run.total_steps and total != run.total_steps):
                raise LogError(f"{path}:{lineno}: step {step}/{total} after step {last[kind]}/{run.total_steps}: "
                               "the file holds more than one run; give each run a log of its own")
            if step > total:
                raise LogError(f"{path}:{lineno}: step {step}/{total}: a step past the run's last: not a speedrun log")
            last[kind] = step
            run.total_steps = total
            tt = _num(fields["train_time"])
            where = f"{path}:{lineno}"
            if kind == "val":
                run.val.append((step, _loss(fields["val_loss"], where), tt))
            else:
                run.train.append((step, tt, _num(fields.get("step_avg", "nan")), _loss(fields.get("train_loss"), where)))
    for side in (path + "l" if path.endswith(".json") else None, os.path.splitext(path)[0] + ".jsonl", path + ".jsonl"):
        if side and side != path and os.path.exists(side):
            _read_json_lines(run, side)
            break
    return run


def _read_json_lines(run, side):
    """Reads the configuration and the step and validation events of the JSON lines beside the
    log, and checks that they are the same run's: the run id, the steps, the losses and times."""
    regular_file(side, "JSON-lines log")
    path = run.path
    configs, steps, vals, seq = [], {}, {}, []
    with open(side, encoding="utf-8", errors="replace") as f:
        for lineno, line, too_long in bounded_lines(f, MAX_JSON_LINE):
            if too_long:
                raise LogError(f"{side}:{lineno}: a line of more than {MAX_JSON_LINE >> 20} MiB: not a run's JSON lines")
            if not line.strip():
                continue
            ev = load_json(line, f"{side}:{lineno}")
            if not isinstance(ev, dict):
                raise LogError(f"{side}:{lineno}: not a JSON object: not a run's JSON lines")
            kind = ev.get("event")
            if lineno == 1 or kind == "config":
                if kind not in (None, "config"):
                    raise LogError(f"{side}:1: begins with a {kind!r} event, not the run's configuration")
                configs.append(ev)
                continue
            if kind not in ("step", "val"):
                continue
            s, total = ev.get("step"), ev.get("total_steps", run.total_steps)
            if not isinstance(s, int) or isinstance(s, bool) or not isinstance(total, int):
                raise LogError(f"{side}:{lineno}: a {kind} event without a whole step number")
            if run.total_steps and total != run.total_steps:
                raise LogError(f"{side}:{lineno}: step {s} of {total}, where {path} runs {run.total_steps} steps: "
                               "the JSON lines of another run")
            key = "train_loss" if kind == "step" else "val_loss"
            record = (_jnum(ev.get("train_time_ms")), _jloss(ev.get(key)) if key in ev else None)
            if record[0] is None or (key in ev and record[1] is None):
                raise LogError(f"{side}:{lineno}: a {kind} event whose train_time_ms or {key} is not a number")
            table = steps if kind == "step" else vals
            if s in table:
                raise LogError(f"{side}:{lineno}: step {s} twice: the file holds more than one run")
            table[s] = record
            if key in ev:
                seq.append((s, key, ev[key]))
    if len(configs) > 1:
        raise LogError(f"{side}: {len(configs)} configuration lines: the file holds more than one run")
    run.config = configs[0] if configs else {}
    run.json_path = side
    cid = run.config.get("run_id")
    if cid and run.run_id and cid != run.run_id:
        raise LogError(f"{side}: run_id {cid} is not the run of {path} ({run.run_id})")
    if bool(cid) != bool(run.run_id):
        raise LogError(f"{side}: {'names run ' + str(cid) if cid else 'names no run'}, {path} "
                       f"{'names run ' + run.run_id if run.run_id else 'names none'}: the JSON lines of another run")
    cfg_steps = run.config.get("steps")
    if isinstance(cfg_steps, int) and run.total_steps and cfg_steps != run.total_steps:
        raise LogError(f"{side}: a configuration of {cfg_steps} steps, where {path} runs {run.total_steps}: "
                       "the JSON lines of another run")
    if not steps and not vals and not run.train and not run.val:
        return
    for what, text_rows, table in (("training step", [(s, tt, l) for s, tt, _, l in run.train], steps),
                                   ("validation", [(s, tt, v) for s, v, tt in run.val], vals)):
        text_steps = {s for s, _, _ in text_rows}
        only_text, only_json = sorted(text_steps - set(table)), sorted(set(table) - text_steps)
        if only_text or only_json:
            s, where, other = (only_text[0], path, side) if only_text else (only_json[0], side, path)
            raise LogError(f"{side}: the {what} at step {s} is in {where} but not in {other}: "
                           "the log and its JSON lines are not one run's")
        for s, tt, loss in text_rows:
            jt, jl = table[s]
            if not _same(tt, jt, TEXT_TIME_TOL) or not _same_loss(loss, jl, TEXT_LOSS_TOL):
                raise LogError(f"{side}: the {what} at step {s} reads train_time {jt} ms, loss {jl} there and {tt} ms, "
                               f"{loss} in {path}: the log and its JSON lines are not one run's")
    run.json_losses = seq
    # The text log prints whole milliseconds; the JSON lines hold the same times to the
    # microsecond: the training times and step averages are taken from them, so that single step
    # times (differences of consecutive train_time values) are not rounded.
    if steps:
        run.train = [(s, steps[s][0], steps[s][0] / (s - 10) if s > 10 else avg, loss) for s, tt, avg, loss in run.train]
        run.times_from_json = True


# configuration entries that differ from run to run of one setting
PER_RUN = ("event", "run_id", "seed", "log_file", "checkpoint_dir", "resume")
# configuration entries that follow from the flags rather than being flags of their own:
# variants may differ in them without naming them (leaks_targets: whether the mask lets a
# prediction see its own target, train_gpt's model/target_leak.h)
DERIVED = ("leaks_targets",)


def setting(run, allow=()):
    """What defines a run's computation and conditions, as its logs record them: the
    configuration without the entries that differ run to run (PER_RUN) and those in allow; the
    step count alone for a log without configuration (modded-nanogpt's)."""
    if run.config:
        return {k: v for k, v in run.config.items() if k not in PER_RUN and k not in allow}
    return {"steps": run.total_steps}


def flag_settings(tokens):
    """{configuration key: value text} of command-line flags: --name value, --name=value, and
    --name alone (True); keys as train_gpt's configuration names them (--seq-len: seq_len)."""
    out, i = {}, 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("--") and len(t) > 2:
            name, eq, value = t[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                out[key] = value
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                out[key] = tokens[i + 1]
                i += 1
            else:
                out[key] = True
        i += 1
    return out


def same_value(recorded, given):
    """Whether a configuration's recorded value is what the flag's text gives."""
    if given is True:
        return recorded is True or recorded == 1
    if isinstance(recorded, bool):
        return given.lower() in (("true", "1") if recorded else ("false", "0"))
    if isinstance(recorded, (int, float)):
        try:
            return float(given) == float(recorded)
        except ValueError:
            return False
    return str(recorded) == given


def write_csv(runs, out):
    w = csv.writer(out)
    w.writerow(["file", "step", "total_steps", "kind", "val_loss", "train_loss", "train_time_ms", "step_avg_ms"])
    for r in runs:
        for s, tt, avg, tl in r.train:
            w.writerow([r.path, s, r.total_steps, "train", "", "" if tl is None else tl, tt, "" if math.isnan(avg) else avg])
        for s, vl, tt in r.val:
            w.writerow([r.path, s, r.total_steps, "val", vl, "", tt, ""])


def main(argv):
    ap = argparse.ArgumentParser(prog="speedrun_logs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="*", metavar="LOG", help="a run's text log (a name that begins with '-' after --)")
    a, unknown = ap.parse_known_args(argv)
    if unknown:  # named, not read as logs (a log named like a flag goes after --)
        ap.error(f"unknown flag(s): {' '.join(unknown)}")
    if not a.logs:
        ap.error("give at least one LOG")
    runs = []
    for p in a.logs:
        r = parse(p)
        if not r.train and not r.val:
            raise LogError(f"{p}: no step lines: not a speedrun log (or the run stopped before its first step)")
        runs.append(r)
    write_csv(runs, sys.stdout)
    return 0


if __name__ == "__main__":
    run_tool(lambda: main(sys.argv[1:]), "speedrun_logs")
