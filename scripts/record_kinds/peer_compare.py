"""Record kind peer_compare: the logs of `bash peer/peer_compare.sh` (train_gpt, the PyTorch peer
peer/torch_peer.py, then train_gpt again, on the same GPUs): logs/train_gpt_1, peer, train_gpt_2
for one GPU and train_gpt_1_gN, peer_gN, train_gpt_2_gN for N GPUs, each a text log (.txt) with its
JSON lines (.jsonl), and summary.txt, the script's table. record.json adds "provenance", required:
where the logs' commit came from (the peer names none read from its tree; record_kinds/peer_logs.py).
Figures: the card, the commit and its provenance, the steps, window and data; per GPU count each
run's median step (of the steps after step 10, from the JSON lines' train_time, as the script
computes it), timed steps, peak memory and start-up; train_gpt's mean of its two runs, train_gpt /
peer (of the mean, and of each run), and each trainer's scaling from one GPU where one GPU ran.
Refused, named: a run missing or unfinished, its text log disagreeing with its JSON lines, mixed
commits or cards, a run on another GPU count or configuration, and a summary.txt that is not what
the script prints from these logs.
"""
import glob
import os
import re
import statistics

from tool_errors import ToolError
from record_kinds.common import checked_source, read_text, stamp_text
from record_kinds.peer_logs import one_code, provenance, read_run

KIND = "peer_compare"
SAME = ("steps", "window_blocks", "train_data", "val_data", "val_tokens", "seq_len", "seqs_per_step")


def _counts(rec):
    counts = []
    for p in glob.glob(os.path.join(rec, "logs", "train_gpt_1*.jsonl")):
        m = re.fullmatch(r"train_gpt_1(?:_g(\d+))?\.jsonl", os.path.basename(p))
        if not m or m.group(1) in ("0", "1") or (m.group(1) or "1").startswith("0"):
            raise ToolError(f"{p}: not a log name of peer_compare.sh (train_gpt_1.jsonl, train_gpt_1_gN.jsonl, N > 1)")
        counts.append(int(m.group(1) or 1))
    if not counts:
        raise ToolError(f"{rec}/logs: no train_gpt_1.jsonl or train_gpt_1_gN.jsonl (the logs of peer_compare.sh)")
    return sorted(counts)


def _median(run):
    """The median of the step times after step 10 (train_time's differences), as peer_compare.sh takes it."""
    s = run["steps"]
    times = [b[1] - a[1] for a, b in zip(s, s[1:]) if b[0] > 10]
    if not times:
        raise ToolError(f"{run['jsonl']}: no timed step (steps 1-10 are not timed)")
    med = statistics.median(times)
    if f"{med:.1f}" != f"{run['summary']['median_step_ms']:.1f}":
        raise ToolError(f"{run['jsonl']}: its steps' train_time gives a median of {med:.1f} ms, its summary "
                        f"{run['summary']['median_step_ms']:.1f}: the JSON lines disagree with themselves")
    return med, len(times)


def _summary_text(groups, record_ms, several):
    """What peer_compare.sh prints into summary.txt for these runs (its own formats)."""
    out, table = [], []
    for g in groups:
        n, names = g["gpus"], list(g["runs"])
        if several:
            out.append(f"{n} GPU{'s' if n > 1 else ''}:")
        w = max(12, *map(len, names))
        out.append(f"{'run':<{w}} {'median ms':>10} {'steps':>6} {'peak GiB':>9} {'start-up s':>11}")
        for name, r in g["runs"].items():
            out.append(f"{name:<{w}} {r['median_ms']:>10.1f} {r['timed_steps']:>6} {r['peak_mib'] / 1024:>9.1f} "
                       f"{r['startup_s']:>11.1f}")
        t1, peer, t2 = (r["median_ms"] for r in g["runs"].values())
        ours = (t1 + t2) / 2
        out.append(f"train_gpt / peer: {ours / peer:.3f} (runs 1 and 2: {t1 / peer:.3f}, {t2 / peer:.3f})")
        if n == 1 and record_ms is not None:
            out.append(f"peer / the record trainer's {record_ms:.0f} ms: {peer / record_ms:.3f}")
        table.append((n, t1, t2, peer, ours / peer))
    out.append("")
    out.append(f"{'GPUs':>4} {'train_gpt 1 ms':>15} {'train_gpt 2 ms':>15} {'peer ms':>9} {'ours / peer':>12}")
    for n, t1, t2, peer, ratio in table:
        out.append(f"{n:>4} {t1:>15.1f} {t2:>15.1f} {peer:>9.1f} {ratio:>12.3f}")
    return out


def compute(rec, meta):
    prov = provenance(rec, meta)
    counts = _counts(rec)
    groups, runs_all = [], []
    for n in counts:
        tail = "" if n == 1 else f"_g{n}"
        g = {"gpus": n, "runs": {}}
        for name, trainer in ((f"train_gpt_1{tail}", "train_gpt"), (f"peer{tail}", "peer"), (f"train_gpt_2{tail}", "train_gpt")):
            r = read_run(rec, name, trainer)
            if r["gpus"] != n:
                raise ToolError(f"{r['config_where']}: world_size {r['gpus']}: the run of {name} is on {n} GPU(s)")
            med, k = _median(r)
            g["runs"][name] = {"median_ms": round(med, 6), "timed_steps": k, "peak_mib": r["peak_mib"],
                               "peak_gib": round(r["peak_mib"] / 1024, 6), "startup_s": round(r["startup_s"], 6)}
            runs_all.append(r)
        groups.append(g)
    first = runs_all[0]
    for r in runs_all:
        for key in SAME:
            if r["config"].get(key) != first["config"].get(key):
                raise ToolError(f"{r['config_where']}: {key} {r['config'].get(key)!r} where {first['jsonl']} has "
                                f"{first['config'].get(key)!r}: one comparison runs one configuration")
        if r["trainer"] == "peer" and r["config"].get("numerics") != "record":
            raise ToolError(f"{r['config_where']}: numerics {r['config'].get('numerics')!r}: peer_compare.sh runs the "
                            "peer with the record's numerics")
    commit, card = one_code(rec, runs_all)
    # summary.txt must be what the script prints from these logs; its RECORD_MS line is the one
    # figure the logs do not hold (the record trainer's step, passed to the script), read from it
    spath = os.path.join(rec, "logs", "summary.txt")
    have = read_text(spath, "summary").rstrip("\n").split("\n")
    rm = [re.fullmatch(r"peer / the record trainer's (\d+) ms: \S+", line) for line in have]
    rm = [m for m in rm if m]
    record_ms = float(rm[0].group(1)) if rm else None
    want = _summary_text(groups, record_ms, len(counts) > 1)
    for i in range(max(len(have), len(want))):
        h = have[i] if i < len(have) else "(nothing)"
        w = want[i] if i < len(want) else "(nothing)"
        if h != w:
            raise ToolError(f"{spath}:{i + 1}: {h!r} where the logs give {w!r}: the summary does not agree with the logs")
    for g in groups:
        t1, peer, t2 = (r["median_ms"] for r in g["runs"].values())
        g["train_gpt_ms"] = round((t1 + t2) / 2, 6)
        g["peer_ms"] = peer
        g["ratio"] = round(g["train_gpt_ms"] / peer, 6)
        g["ratio_runs"] = [round(t1 / peer, 6), round(t2 / peer, 6)]
    if counts[0] == 1:
        one = groups[0]
        for g in groups[1:]:
            g["scaling"] = {"train_gpt": round(one["train_gpt_ms"] / g["train_gpt_ms"], 6),
                            "peer": round(one["peer_ms"] / g["peer_ms"], 6)}
    c = first["config"]
    fig = {"kind": KIND, "card": card, "commit": commit, "provenance": prov}
    source = checked_source(rec, [r["source"] for r in runs_all if r["trainer"] == "train_gpt"], f"{rec}/logs")
    if source:
        fig["source"] = source
    fig.update(steps=c["steps"], window_blocks=c.get("window_blocks"), train_data=c.get("train_data"), gpus=counts,
               groups=groups)
    return fig


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    g0 = fig["groups"][0]
    k = next(iter(g0["runs"].values()))["timed_steps"]
    rows = [f"Record `results/records/{rec_name}` ({fig['card']}, {stamp_text(fig)}; {fig['provenance']}; "
            f"{fig['steps']} steps, median of the last {k}, window {fig['window_blocks']} blocks, data "
            f"`{fig['train_data']}`):", "",
            "| GPUs | train_gpt | peer | train_gpt again | train_gpt / peer (runs 1, 2) | scaling: train_gpt, peer "
            "| peak GiB: train_gpt 1, 2 (device memory in use); peer (allocated by PyTorch) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for g in fig["groups"]:
        r = list(g["runs"].values())
        sc = f"{g['scaling']['train_gpt']:.3f}x, {g['scaling']['peer']:.3f}x" if "scaling" in g else "-"
        rows.append(f"| {g['gpus']} | {r[0]['median_ms']:.1f} ms | {r[1]['median_ms']:.1f} ms | {r[2]['median_ms']:.1f} ms "
                    f"| {g['ratio']:.3f} ({g['ratio_runs'][0]:.3f}, {g['ratio_runs'][1]:.3f}) | {sc} "
                    f"| {r[0]['peak_gib']:.1f}, {r[2]['peak_gib']:.1f}; {r[1]['peak_gib']:.1f} |")
    return "\n".join(rows) + "\n"
