"""Record kind peer_full_run: the logs of `bash peer/peer_full_run.sh` (each trainer's whole run of
the speedrun preset on the same GPUs, train_gpt and the PyTorch peer peer/torch_peer.py):
logs/train_gpt_gN and peer_gN, each a text log (.txt) with its JSON lines (.jsonl), and
summary.txt, the table peer/full_run_logs.py printed. record.json adds "provenance", required:
where the logs' commit came from (the peer names none read from its tree; record_kinds/peer_logs.py).
Figures: the card, GPU count, steps, data, validation tokens, the commit and its provenance; per trainer its
train_time (steps 11 on, validation excluded: the train_time of the last validation), step average,
final validation loss, validations, peak memory (train_gpt's device memory in use; the peer's allocated by
PyTorch, and its reserved), start-up; train_gpt / peer of train_time and of peak memory (and against
the peer's reserved memory); each span between validations' ms a step for both and their ratio.
Refused, named: a run missing or unfinished, its text log disagreeing with its JSON lines, mixed
commits or cards, the two runs on other GPU counts, steps or data, validations whose steps or times
do not go up, and a summary.txt that is not what peer/full_run_logs.py prints from these logs.
"""
import glob
import os
import re
import sys

from tool_errors import ToolError, field
from record_kinds.common import checked_source, read_text, stamp_text
from record_kinds.peer_logs import MAX_MIB, one_code, provenance, read_run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "peer"))
import full_run_logs  # noqa: E402  (peer/full_run_logs.py: the table the record's summary.txt must be)

KIND = "peer_full_run"


def _spans(run):
    """[(first step, last step, ms a step)] between validations after step 10, as
    peer/full_run_logs.py computes them (its spans)."""
    events = [{"event": "val", "step": st, "train_time_ms": t, "where": where} for where, st, t in run["vals"]]
    return [(a, b, ms) for (a, b), ms in sorted(full_run_logs.spans(events).items())]


def compute(rec, meta):
    prov = provenance(rec, meta)
    found = sorted(glob.glob(os.path.join(rec, "logs", "*.jsonl")))
    names = [os.path.basename(p)[:-6] for p in found]
    counts = {re.fullmatch(r"(?:train_gpt|peer)_g([1-9]\d*)", n).group(1) if re.fullmatch(r"(?:train_gpt|peer)_g([1-9]\d*)", n)
              else None for n in names}
    if len(counts) != 1 or None in counts or len(names) != 2:
        raise ToolError(f"{rec}/logs: want train_gpt_gN.jsonl and peer_gN.jsonl of one GPU count N (the logs of "
                        f"peer_full_run.sh), found {', '.join(os.path.basename(p) for p in found) or 'none'}")
    gpus = int(counts.pop())
    runs = {t: read_run(rec, f"{t}_g{gpus}", t) for t in ("train_gpt", "peer")}
    t, p = runs["train_gpt"], runs["peer"]
    for r in runs.values():
        if r["gpus"] != gpus:
            raise ToolError(f"{r['config_where']}: world_size {r['gpus']}: the log's name says {gpus} GPU(s)")
        for key in ("steps", "train_data", "val_data", "val_tokens", "seq_len", "seqs_per_step"):
            if r["config"].get(key) != t["config"].get(key):
                raise ToolError(f"{r['config_where']}: {key} {r['config'].get(key)!r} where {t['jsonl']} has "
                                f"{t['config'].get(key)!r}: both trainers run one configuration")
    commit, card = one_code(rec, list(runs.values()))
    steps = t["total_steps"]
    if steps <= 10:
        raise ToolError(f"{t['config_where']}: steps {steps}: steps 1-10 are not timed")
    rows = {}
    for name, r in runs.items():
        secs = r["last_ms"] / 1000
        rows[name] = {"train_time_s": round(secs, 6), "step_avg_ms": round(1000 * secs / (steps - 10), 6),
                      "final_val_loss": r["last_loss"], "peak_mib": r["peak_mib"], "startup_s": round(r["startup_s"], 6),
                      "validations": len(r["vals"])}
    reserved = field(p["summary"], "peak_reserved_mib", f"{p['jsonl']} (summary)", float, 0, MAX_MIB, above=0)
    rows["peer"]["peak_reserved_mib"] = reserved
    st, sp = _spans(t), _spans(p)
    if [(a, b) for a, b, _ in st] != [(a, b) for a, b, _ in sp]:
        raise ToolError(f"{rec}/logs: the two runs validate at different steps: their spans do not pair")
    spans = [(a, b, mt, mp) for (a, b, mt), (_, _, mp) in zip(st, sp)]
    spath = os.path.join(rec, "logs", "summary.txt")
    have = read_text(spath, "summary").rstrip("\n").split("\n")
    want, notes, bad = full_run_logs.table(os.path.join(rec, "logs"), gpus, steps, t["config"].get("train_data"))
    if bad or notes or not want:
        raise ToolError(f"{rec}/logs: peer/full_run_logs.py tables no two finished runs here: {'; '.join(bad + notes)}")
    for i in range(max(len(have), len(want))):
        h = have[i] if i < len(have) else "(nothing)"
        w = want[i] if i < len(want) else "(nothing)"
        if h != w:
            raise ToolError(f"{spath}:{i + 1}: {h!r} where the logs give {w!r}: the summary does not agree with the logs")
    fig = {"kind": KIND, "card": card, "gpus": gpus, "steps": steps, "train_data": t["config"].get("train_data"),
           "val_tokens": t["config"].get("val_tokens"),
           "commit": commit, "provenance": prov}
    source = checked_source(rec, [runs["train_gpt"]["source"]], f"{rec}/logs")
    if source:
        fig["source"] = source
    tr, pr = rows["train_gpt"], rows["peer"]
    fig.update(runs=rows, ratio_train_time=round(tr["train_time_s"] / pr["train_time_s"], 6),
               ratio_peak=round(tr["peak_mib"] / pr["peak_mib"], 6), ratio_peak_reserved=round(tr["peak_mib"] / reserved, 6),
               spans=[{"steps": [a, b], "train_gpt_ms": round(mt, 6), "peer_ms": round(mp, 6), "ratio": round(mt / mp, 6)}
                      for a, b, mt, mp in spans])
    rs = [s["ratio"] for s in fig["spans"]]
    fig.update(span_ratio_min=min(rs), span_ratio_max=max(rs))
    return fig


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    r, p = fig["runs"]["train_gpt"], fig["runs"]["peer"]
    rows = [f"Record `results/records/{rec_name}` ({fig['card']} x {fig['gpus']}, {stamp_text(fig)}; {fig['provenance']}; "
            f"{fig['steps']} steps, validations of {fig['val_tokens']} tokens, data `{fig['train_data']}`):", "",
            "| run | train_time | step average | final val loss | peak GPU memory | start-up |",
            "| --- | --- | --- | --- | --- | --- |",
            f"| train_gpt | {r['train_time_s']:.1f} s | {r['step_avg_ms']:.2f} ms | {r['final_val_loss']:.4f} "
            f"| {r['peak_mib']:.0f} MiB (device memory in use) | {r['startup_s']:.1f} s |",
            f"| peer | {p['train_time_s']:.1f} s | {p['step_avg_ms']:.2f} ms | {p['final_val_loss']:.4f} "
            f"| {p['peak_mib']:.0f} MiB allocated by PyTorch ({p['peak_reserved_mib']:.0f} reserved) | {p['startup_s']:.1f} s |",
            f"| train_gpt / peer | {fig['ratio_train_time']:.3f} | | | {fig['ratio_peak']:.3f} (against reserved "
            f"{fig['ratio_peak_reserved']:.3f}) | |", "",
            "| steps | train_gpt ms a step | peer ms a step | train_gpt / peer |", "| --- | --- | --- | --- |"]
    rows += [f"| {s['steps'][0]}-{s['steps'][1]} | {s['train_gpt_ms']:.2f} | {s['peer_ms']:.2f} | {s['ratio']:.3f} |"
             for s in fig["spans"]]
    return "\n".join(rows) + "\n"
