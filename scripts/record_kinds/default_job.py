"""Record kind default_job: logs/run_*.txt: the logs of `./train_gpt` runs (the README's first command;
its output, or its --log-file, with run_*.err its standard error beside it). Figures: the card, the
commit, runs, runs completed ("train_gpt: done"), each failure's error line, the final validation
loss and the median step (train_gpt's summary line) of each completed run, their least and greatest,
the peak memory; in a record dated after 2026-12-08 (when the kind gained this figure: a record's
figures stay those of its day), where every completed run has its JSON lines beside its log
(run_*.jsonl), how many distinct loss sequences they hold, every training and validation loss
compared as written, to the bit (one: the runs are deterministic).
"""
import glob
import json
import os
import re

from tool_errors import ToolError
from record_kinds.common import checked_source, number, read_text, record_date, stamp_text, train_gpt_stamp

KIND = "default_job"
LOSS_SEQUENCES_SINCE = "2026-12-08"  # records after this day count their distinct loss sequences


def compute(rec, meta):
    logs = sorted(glob.glob(os.path.join(rec, "logs", "run_*.txt")))
    if not logs:
        raise ToolError(f"{rec}/logs: no run_*.txt log")
    runs, commits, cards, sources, run_ids = [], set(), set(), set(), {}
    for path in logs:
        text = read_text(path)
        lines = text.splitlines()
        run_id, commit, source = train_gpt_stamp(path, lines)
        run_ids[os.path.basename(path)] = run_id
        commits.add(commit)
        sources.add(source)
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
    done = [r for r in runs if r["completed"]]
    fig = {"kind": "default_job", "commit": commits.pop(), "card": cards.pop(), "runs": len(runs), "completed": len(done),
           "failures": [f"{r['log']}: {r['error']}" for r in runs if not r["completed"]]}
    source = checked_source(rec, sources, f"{rec}/logs")
    if source:  # logs of builds before the digest name none
        fig["source"] = source
    if done:
        vl = [r["final_val_loss"] for r in done]
        ms = sorted(r["median_step_ms"] for r in done)
        fig.update(final_val_loss_min=min(vl), final_val_loss_max=max(vl), median_step_ms_min=ms[0], median_step_ms_max=ms[-1],
                   median_step_ms_median=ms[len(ms) // 2], peak_mib=max(r["peak_mib"] for r in done))
        sequences = loss_sequences(rec, done, run_ids) if record_date(rec) > LOSS_SEQUENCES_SINCE else None
        if sequences is not None:
            fig["loss_sequences"] = len(set(sequences))
    fig["per_run"] = runs
    return fig


def loss_sequences(rec, done, run_ids):
    """Each completed run's losses as its JSON lines write them (event, step, the number's text), or
    None where a run has no JSON lines; ToolError for JSON lines that are not the run's or not JSON."""
    out = []
    for r in done:
        path = os.path.join(rec, "logs", r["log"][:-4] + ".jsonl")
        if not os.path.exists(path):
            return None
        seq = []
        for n, line in enumerate(read_text(path).splitlines(), 1):
            try:
                j = json.loads(line, parse_float=str, parse_int=str, parse_constant=str)  # numbers kept as written
            except ValueError:
                raise ToolError(f"{path}:{n}: not a JSON line")
            if not isinstance(j, dict):
                raise ToolError(f"{path}:{n}: not a JSON object")
            if n == 1 and (j.get("event") != "config" or j.get("run_id") != run_ids[r["log"]]):
                raise ToolError(f"{path}:1: not the JSON lines of {r['log']} (its first line is the run's configuration, "
                                f"run_id {run_ids[r['log']]})")
            for key in ("train_loss", "val_loss"):
                if key in j:
                    seq.append((j.get("event"), j.get("step"), key, j[key]))
        if not seq:
            raise ToolError(f"{path}: no loss in the JSON lines of a completed run")
        out.append(tuple(seq))
    return out


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    rows = [f"Record `results/records/{rec_name}` ({fig['card']}, {stamp_text(fig)}):", "", "| figure | value |", "| --- | --- |"]
    rows.append(f"| runs completed | {fig['completed']} of {fig['runs']} |")
    if fig["completed"]:
        rows.append(f"| final validation loss | {fig['final_val_loss_min']:.4f} to {fig['final_val_loss_max']:.4f} |")
        rows.append(f"| median step | {fig['median_step_ms_min']} to {fig['median_step_ms_max']} ms "
                    f"(median of runs {fig['median_step_ms_median']}) |")
        rows.append(f"| peak GPU memory | {fig['peak_mib']} MiB |")
        if "loss_sequences" in fig:
            same = "identical to the bit" if fig["loss_sequences"] == 1 else f"{fig['loss_sequences']} distinct sequences"
            rows.append(f"| every loss of the completed runs | {same} |")
    rows += [f"| failed | {f} |" for f in fig["failures"]]
    return "\n".join(rows) + "\n"
