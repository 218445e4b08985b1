"""What the kinds peer_compare and peer_full_run share: one run's logs, train_gpt's or the PyTorch
peer's (peer/torch_peer.py), read as a text log and its JSON lines that must tell the same story.

A run is NAME.txt and NAME.jsonl. The JSON lines give the figures at full precision; the text log
must agree with them to the digits it prints (its run id, card, GPU count, timed median, peak
memory, start-up, last validation), so that an edit to either is refused, named by file and line.
The peer names no commit read from its tree: its JSON lines' git_commit is the GIT_COMMIT variable
of the run's command (empty where none was set), and its text log names none; train_gpt's commit is the one
make stamped, which peer/peer_compare.sh and peer/peer_full_run.sh set from the same GIT_COMMIT
when it is given. A record of these kinds therefore states where its commit came from in
record.json's "provenance", and its table prints that beside the commit.
"""
import os
import re

from tool_errors import ToolError, field, read_json_lines
from record_kinds.common import known_commit, read_text, train_gpt_stamp

MAX_MS = 1e10     # a train_time above this (about 115 days) is no measurement
MAX_MIB = 1e7     # GPU memory, MiB
MAX_LOSS = 1e4    # a validation loss is a mean cross-entropy
MAX_STEPS = 10 ** 9
TRAINERS = {"train_gpt": "train_gpt", "peer": "torch_peer"}  # a run's trainer: the name its logs print


def provenance(rec, meta):
    """record.json's "provenance": the sentence on where the logs' commit came from, required."""
    p = meta.get("provenance")
    if not isinstance(p, str) or not p.strip():
        raise ToolError(f"{rec}/record.json: no \"provenance\" sentence: the peer's logs name no commit read from its "
                        "tree (only the GIT_COMMIT variable the run was given), so a record says where its commit came from")
    return p.strip()


def _line(path, lines, pattern, what):
    """(line number, match) of the one line of a text log matching pattern, or ToolError naming the file."""
    found = [(n, m) for n, line in enumerate(lines, 1) for m in [re.fullmatch(pattern, line)] if m]
    if len(found) != 1:
        raise ToolError(f"{path}: {'no' if not found else len(found)} {what} line{'s' if found else ''} "
                        "(a run's log prints it once)")
    return found[0]


def _agree(path, n, name, printed, value, digits):
    """The text log's printed figure is the JSON lines' value at the digits it prints (within half a
    unit of its last digit, and a thousandth of that for the JSON lines' own rounding: the peer
    rounds a half up where Python's format rounds it to even), or ToolError."""
    if not re.fullmatch(r"-?\d+(?:\.\d+)?", printed) or abs(float(printed) - value) > 0.5005 * 10.0 ** -digits:
        raise ToolError(f"{path}:{n}: {name} {printed} where the JSON lines give {value:.{digits}f}: the two logs of one "
                        "run disagree")


def read_run(rec, name, trainer):
    """One run's figures from logs/NAME.jsonl and logs/NAME.txt: its events, configuration, commit
    (train_gpt's; the peer's JSON git_commit, "" where the run was given none), card, GPU count, peak
    memory (MiB), start-up (s), the step events' (step, train_time_ms) and the validations' (where,
    step, train_time_ms)."""
    base = os.path.join(rec, "logs", name)
    jpath, tpath = base + ".jsonl", base + ".txt"
    for p in (jpath, tpath):
        if not os.path.exists(p):
            raise ToolError(f"{p}: missing (each run is its text log and its JSON lines)")
    ev = []
    for where, e in read_json_lines(jpath, "run's JSON lines"):
        if not isinstance(e, dict):
            raise ToolError(f"{where}: not a run's JSON lines (a line that is not an object)")
        ev.append((where, e))
    if not ev or ev[0][1].get("event") != "config":
        raise ToolError(f"{jpath}:1: not a run's JSON lines (the first line is its configuration)")
    cwhere, conf = ev[0]
    if trainer == "peer" and conf.get("trainer") != "torch_peer":
        raise ToolError(f"{cwhere}: trainer {conf.get('trainer')!r}: not the peer's JSON lines (torch_peer)")
    if trainer == "train_gpt" and "trainer" in conf:
        raise ToolError(f"{cwhere}: trainer {conf.get('trainer')!r}: not train_gpt's JSON lines")
    gpus = field(conf, "world_size", cwhere, int, 1, 65536)
    card = field(conf, "gpu", cwhere, str)
    run_id = field(conf, "run_id", cwhere, str)
    commit = field(conf, "git_commit", cwhere, str)

    def one(event):
        hits = [(w, e) for w, e in ev if e.get("event") == event]
        if len(hits) != 1:
            raise ToolError(f"{jpath}: {len(hits)} {event} events (a finished run writes one)")
        return hits[0]
    swhere, summ = one("summary")
    uwhere, up = one("startup")
    peak = field(summ, "peak_memory_mib", swhere, float, 0, MAX_MIB, above=0)
    startup = field(up, "startup_s", uwhere, float, 0, 1e7)
    steps = []
    for w, e in ev:
        if e.get("event") == "step":
            steps.append((field(e, "step", w, int, 0, MAX_STEPS), field(e, "train_time_ms", w, float, 0, MAX_MS)))
    vals = [(w, e) for w, e in ev if e.get("event") == "val"]
    if not vals:
        raise ToolError(f"{jpath}: no val event (a run validates at its last step)")
    vwhere, last = vals[-1]
    total = field(conf, "steps", cwhere, int, 1, MAX_STEPS)
    if field(last, "step", vwhere, int, 0, MAX_STEPS) != total:
        raise ToolError(f"{vwhere}: the last validation is at step {last.get('step')}, not the run's last step {total}: "
                        "the run did not finish")
    last_ms = field(last, "train_time_ms", vwhere, float, 0, MAX_MS)
    last_loss = field(last, "val_loss", vwhere, float, 0, MAX_LOSS)
    median = field(summ, "median_step_ms", swhere, float, 0, MAX_MS, above=0)

    lines = read_text(tpath).splitlines()
    prog = TRAINERS[trainer]
    first = lines[0] if lines else ""
    if trainer == "train_gpt":
        text_run_id, text_commit, source = train_gpt_stamp(tpath, lines)
        if text_commit != commit:
            raise ToolError(f"{tpath}:1: commit {text_commit!r} where its JSON lines name {commit!r}")
    else:
        m = re.fullmatch(r"run_id:(\S+) torch_peer", first)
        if not m:
            raise ToolError(f"{tpath}:1: not the peer's log (its first line is run_id:ID torch_peer)")
        text_run_id, source = m.group(1), None
        if commit:
            known_commit(commit, f"{cwhere} (git_commit)", jpath)
    if text_run_id != run_id:
        raise ToolError(f"{tpath}:1: run id {text_run_id} where its JSON lines name {run_id}: not one run's logs")
    if trainer == "train_gpt":
        n, h = _line(tpath, lines, r"train_gpt: (.+?) x (\d+), .*", "card")
        tcard, tgpus = h.group(1), int(h.group(2))
    else:
        n, h = _line(tpath, lines, r"torch_peer: (.+?), torch \S+, .*?(?:, (\d+) GPUs \(.*\))?", "card")
        tcard, tgpus = h.group(1), int(h.group(2) or 1)
    if (tcard, tgpus) != (card, gpus):
        raise ToolError(f"{tpath}:{n}: {tcard} x {tgpus} where its JSON lines name {card} x {gpus}")
    n, h = _line(tpath, lines, rf"{prog}: start-up (\S+) s .*", "start-up")
    _agree(tpath, n, "start-up", h.group(1), startup, 1)
    n, h = _line(tpath, lines, rf"{prog}: \d+ timed steps: median (\S+) ms a step, .*", "timed median")
    _agree(tpath, n, "the median step", h.group(1), median, 1)
    n, h = _line(tpath, lines, rf"{prog}: done; peak GPU memory (\d+) MiB.*", "peak memory")
    _agree(tpath, n, "peak memory", h.group(1), peak, 0)
    printed = {}  # each step's train_time as the text log prints it, in whole ms
    for n, line in enumerate(lines, 1):
        m = re.fullmatch(r"step:(\d+)/\d+ train_loss:\S+ train_time:(\d+)ms step_avg:\S+", line)
        if m:
            printed[int(m.group(1))] = (n, m.group(2))
    for s, t in steps:
        if s not in printed:
            raise ToolError(f"{tpath}: no line of step {s}, which its JSON lines hold: not one run's logs")
        _agree(tpath, printed[s][0], f"step {s}'s train_time", printed[s][1], t, 0)
    n, h = _line(tpath, lines, rf"step:{total}/{total} val_loss:(\S+) train_time:(\d+)ms step_avg:\S+", "last validation")
    _agree(tpath, n, "the last validation loss", h.group(1), last_loss, 4)
    _agree(tpath, n, "the last validation's train_time", h.group(2), last_ms, 0)
    vals = [(w, field(e, "step", w, int, 0, MAX_STEPS), field(e, "train_time_ms", w, float, 0, MAX_MS)) for w, e in vals]
    return {"trainer": trainer, "name": name, "config": conf, "config_where": cwhere, "commit": commit, "source": source, "vals": vals,
            "card": card, "gpus": gpus, "peak_mib": peak, "startup_s": startup, "steps": steps, "total_steps": total,
            "last_ms": last_ms, "last_loss": last_loss, "summary": summ, "jsonl": jpath}


def one_code(rec, runs):
    """(commit, card) every run names: train_gpt's commit, the peer's where its call set one; ToolError
    on mixed commits or cards (a record is one code on one card)."""
    tg = {r["commit"] for r in runs if r["trainer"] == "train_gpt"}
    peer = {r["commit"] for r in runs if r["trainer"] == "peer"} - {""}
    cards = {r["card"] for r in runs}
    if len(tg) != 1 or not peer <= tg:
        raise ToolError(f"{rec}/logs: the runs name the commits {', '.join(sorted(tg | peer))}: a record is one code")
    if len(cards) != 1:
        raise ToolError(f"{rec}/logs: the runs name the cards {', '.join(sorted(cards))}: a record is one card")
    return tg.pop(), cards.pop()
