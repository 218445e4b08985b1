"""Record kind scaling: logs/*.txt: `./train_gpt` runs of one host at one commit on 1, 2, 4 ...
GPUs (`mpirun -np N`), each text log with its JSON lines beside it (NAME.jsonl, `--log-file`'s
twin). record.json names the groups the figures compare: "groups": {"NAME": {"runs": [LOG, ...]}},
LOG a text log's name without .txt, every log of logs/*.txt in one group; the runs of a group share
one configuration (the JSON config line but for the run's id, log file and GPU count, and whether
`--profile` ran), and a group may add "one_gpu_of": "OTHER" to divide its steps into another
group's one-GPU runs (the configuration's differences are then printed beside it). Figures: the
card, the commit; per run its GPU count, peak memory (the largest rank's) and median step over the timed steps (the JSON steps'
train_time_ms differences, which must be the summary's median; the text log's median must be it
to 0.1 ms, and its losses the JSON lines' to 4 decimals); per group and GPU count the mean of its
runs' medians and the speed-up, the one-GPU mean over it; each run's losses' digest (equal digests,
in this record or another, are the same losses to the bit); per GPU count in a group and over the whole
record, how many distinct loss sequences (every train and validation loss of the JSON lines, to the bit) its
runs of the same step count have; a profiled run's GPU time a step by category (as kind profile).
"""
import glob
import hashlib
import json
import math
import os
import re

from tool_errors import ToolError
from record_kinds.profile import category_table
from record_kinds.common import checked_source, number, read_text, stamp_text, train_gpt_card, train_gpt_stamp

KIND = "scaling"
# the config fields that name a run rather than its configuration
RUN_FIELDS = ("event", "run_id", "log_file", "world_size")


def _json_lines(path):
    events = []
    for n, line in enumerate(read_text(path, "JSON lines").splitlines(), 1):
        try:
            e = json.loads(line, parse_constant=lambda c: float("nan"))
        except ValueError:
            raise ToolError(f"{path}:{n}: not a JSON line")
        if not isinstance(e, dict) or not isinstance(e.get("event"), str):
            raise ToolError(f"{path}:{n}: a JSON line without its event")
        events.append((n, e))
    return events


def _finite(value, where, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ToolError(f"{where}: {name} {value!r} is not a finite number")
    return float(value)


def _run(rec, log):
    """One run's figures and its configuration, from its text log and its JSON lines."""
    txt, jl = os.path.join(rec, "logs", log + ".txt"), os.path.join(rec, "logs", log + ".jsonl")
    text = read_text(txt)
    lines = text.splitlines()
    run_id, commit, source = train_gpt_stamp(txt, lines)
    card, gpus = train_gpt_card(txt, text)
    median_txt = re.search(r"^train_gpt: (\d+) timed steps: median (\S+) ms a step", text, re.M)
    if not median_txt:
        raise ToolError(f"{txt}: no 'train_gpt: N timed steps: median ...' line (the run did not finish its timed steps)")
    if not os.path.exists(jl):
        raise ToolError(f"{jl}: missing (the run's JSON lines, beside its text log)")
    events = _json_lines(jl)
    configs = [e for _, e in events if e["event"] == "config"]
    summaries = [(n, e) for n, e in events if e["event"] == "summary"]
    if len(configs) != 1 or len(summaries) != 1:
        raise ToolError(f"{jl}: {len(configs)} config and {len(summaries)} summary lines (one of each is a whole run)")
    config = configs[0]
    if config.get("run_id") != run_id or config.get("git_commit") != commit:
        raise ToolError(f"{jl}: its config line's run_id or git_commit is not the text log's ({run_id}, {commit}): "
                        "the JSON lines of another run")
    if not isinstance(config.get("steps"), int) or isinstance(config.get("steps"), bool):
        raise ToolError(f"{jl}: its config line's steps {config.get('steps')!r} is not a whole number")
    if config.get("world_size") != gpus or config.get("gpu") != card:
        raise ToolError(f"{jl}: its config line's gpu and world_size are not the text log's ({card} x {gpus})")
    # every loss of the JSON lines, and the text log's (printed to 4 decimals) against them
    losses, times = [], {}
    for n, e in events:
        if e["event"] in ("step", "val"):
            key = "train_loss" if e["event"] == "step" else "val_loss"
            step = e.get("step")
            if not isinstance(step, int) or isinstance(step, bool):
                raise ToolError(f"{jl}:{n}: step {step!r} is not a whole number")
            loss = _finite(e.get(key), f"{jl}:{n}", key)
            losses.append((e["event"], step, loss))
            if e["event"] == "step":
                times[step] = _finite(e.get("train_time_ms"), f"{jl}:{n}", "train_time_ms")
    printed = [(("step" if k == "train_loss" else "val"), int(s), v)
               for s, k, v in re.findall(r"^step:(\d+)/\d+ (train_loss|val_loss):(\S+) ", text, re.M)]
    if len(printed) != len(losses):
        raise ToolError(f"{txt}: {len(printed)} loss lines against the JSON lines' {len(losses)}: not the same run")
    for (ev, step, v), (jev, jstep, jloss) in zip(printed, losses):
        value = number(v, txt, f"step {step}'s loss")
        if (ev, step) != (jev, jstep) or abs(value - jloss) > 0.00005 + 1e-9:  # printed to 4 decimals
            raise ToolError(f"{txt}: step {step}'s loss {v} is not the JSON lines' {jloss!r}: not the same run")
    # the median step over the timed steps: the last `timed_steps` steps, each step's time the
    # difference of train_time_ms (which the timing starts at 0 before the first timed step)
    sn, summary = summaries[0]
    timed = _finite(summary.get("timed_steps"), f"{jl}:{sn}", "timed_steps")
    last = max(times) if times else 0
    timed_n = int(timed)
    if timed_n != timed or timed_n < 1 or timed_n != int(median_txt.group(1)) or any(s not in times for s in range(last - timed_n, last + 1)):
        raise ToolError(f"{jl}:{sn}: timed_steps {timed!r} is not the text log's {median_txt.group(1)}, or steps are missing")
    durations = sorted(times[s] - times[s - 1] for s in range(last - timed_n + 1, last + 1))
    half = len(durations) // 2
    median = durations[half] if len(durations) % 2 else (durations[half - 1] + durations[half]) / 2
    stated = _finite(summary.get("median_step_ms"), f"{jl}:{sn}", "median_step_ms")
    if abs(stated - median) > 1e-6 * median:  # the same float sums, in another order at most
        raise ToolError(f"{jl}:{sn}: median_step_ms {stated!r} is not the median of the timed steps' times ({median!r})")
    if abs(number(median_txt.group(2), txt, "the median step") - stated) > 0.05 + 1e-9:  # printed to 0.1 ms
        raise ToolError(f"{txt}: the median step {median_txt.group(2)} ms is not the JSON lines' {stated!r}")
    peak = re.search(r"^train_gpt: done; peak GPU memory (\d+) MiB(?: \(the largest rank's\))?$", text, re.M)
    if not peak:
        raise ToolError(f"{txt}: no 'train_gpt: done; peak GPU memory N MiB' line (the run did not finish)")
    profiled = bool(re.search(r"^profile: GPU time per step by category", text, re.M))
    conf = {k: v for k, v in config.items() if k not in RUN_FIELDS}
    conf["profile"] = profiled
    digest = hashlib.sha256(json.dumps(losses).encode()).hexdigest()[:16]  # equal digests: the same losses to the bit
    fig = {"log": log, "gpus": gpus, "median_step_ms": round(stated, 6), "timed_steps": [last - timed_n + 1, last],
           "losses_sha256": digest, "peak_mib": int(peak.group(1))}
    if profiled:
        steps, cats, total = category_table(txt, lines)
        fig["profiled"] = True
        fig["profile"] = {"profiled_steps": steps, "categories": cats, "total_ms": total}
    return fig, conf, commit, card, source, tuple(losses)


def compute(rec, meta):
    groups = meta.get("groups")
    if not isinstance(groups, dict) or not groups:
        raise ToolError(f"{rec}/record.json: no \"groups\": {{NAME: {{\"runs\": [LOG, ...]}}}} (the runs the figures compare)")
    for name, g in groups.items():
        if (not isinstance(g, dict) or not isinstance(g.get("runs"), list) or not g["runs"]
                or not all(isinstance(x, str) for x in g["runs"]) or not isinstance(g.get("one_gpu_of", name), str)):
            raise ToolError(f"{rec}/record.json: group {name!r} is not {{\"runs\": [LOG, ...]}} (names of logs, and "
                            "optionally \"one_gpu_of\": GROUP)")
    texts = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(rec, "logs", "*.txt")))
    named = [log for g in groups.values() for log in g["runs"]]
    if sorted(named) != texts:
        extra = sorted(set(texts) - set(named)) + sorted(set(named) - set(texts))
        raise ToolError(f"{rec}/record.json: its groups name each log of logs/*.txt once ({', '.join(extra) or 'one named twice'} "
                        "not so)")
    runs, confs, commits, cards, sources, losses = {}, {}, set(), set(), set(), {}
    for log in texts:
        fig, conf, commit, card, source, loss = _run(rec, log)
        runs[log], confs[log], losses[log] = fig, conf, loss
        commits.add(commit)
        cards.add(card)
        sources.add(source)
    if len(commits) != 1 or len(cards) != 1:
        raise ToolError(f"{rec}/logs: the runs name {len(commits)} commits and {len(cards)} cards: a record is one code on one card "
                        f"({', '.join(sorted(commits))}; {', '.join(sorted(cards))})")
    out = {"kind": KIND, "commit": commits.pop(), "card": cards.pop()}
    source = checked_source(rec, sources, f"{rec}/logs")
    if source:
        out["source"] = source
    gfigs = {}
    for name, g in groups.items():
        where = f"{rec}/record.json: group {name}"
        if set(g) - {"runs", "one_gpu_of"}:
            raise ToolError(f"{where}: unknown fields {', '.join(sorted(set(g) - {'runs', 'one_gpu_of'}))}")
        conf = confs[g["runs"][0]]
        for log in g["runs"][1:]:
            diff = sorted(k for k in set(conf) | set(confs[log]) if conf.get(k) != confs[log].get(k))
            if diff:
                raise ToolError(f"{where}: {log} runs another configuration than {g['runs'][0]} ({', '.join(diff)}): "
                                "a group is one configuration")
        by_n, seqs_n = {}, {}
        for log in g["runs"]:
            by_n.setdefault(runs[log]["gpus"], []).append(runs[log]["median_step_ms"])
            seqs_n.setdefault(runs[log]["gpus"], set()).add(losses[log])
        gf = {"runs": [runs[log] for log in g["runs"]], "timed_steps": runs[g["runs"][0]]["timed_steps"]}
        base_name = g.get("one_gpu_of", name)
        if base_name not in groups:
            raise ToolError(f"{where}: one_gpu_of {base_name!r} is not a group of this record")
        base = [runs[log]["median_step_ms"] for log in groups[base_name]["runs"] if runs[log]["gpus"] == 1]
        if base_name != name:
            if not base:
                raise ToolError(f"{where}: one_gpu_of {base_name} has no one-GPU run")
            other = confs[groups[base_name]["runs"][0]]
            gf["one_gpu_of"] = base_name
            gf["differs_from_it"] = sorted(k for k in set(conf) | set(other) if conf.get(k) != other.get(k))
        one = sum(base) / len(base) if base else None
        per = []
        for n in sorted(by_n):
            mean = sum(by_n[n]) / len(by_n[n])
            row = {"gpus": n, "runs": len(by_n[n]), "mean_step_ms": round(mean, 6), "distinct_losses": len(seqs_n[n])}
            if one is not None and n > 1:
                row["speedup"] = round(one / mean, 6)  # 6 decimals: a page rounds it once, to its own digits
            per.append(row)
        gf["per_gpus"] = per
        gfigs[name] = gf
    out["groups"] = gfigs
    # the losses to the bit: per GPU count, over the record's runs of one step count, the distinct sequences
    seqs = {}
    for log, loss in losses.items():
        seqs.setdefault((runs[log]["gpus"], confs[log]["steps"]), set()).add(loss)
    out["loss_sequences"] = [{"gpus": n, "steps": s, "runs": sum(1 for log in losses if (runs[log]["gpus"], confs[log]["steps"]) == (n, s)),
                              "distinct": len(v)} for (n, s), v in sorted(seqs.items())]
    speedups = [r["speedup"] for g in gfigs.values() for r in g["per_gpus"] if "speedup" in r]
    if speedups:
        out["speedup_min"], out["speedup_max"] = min(speedups), max(speedups)
    return out


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    rows = [f"Record `results/records/{rec_name}` ({fig['card']}, {stamp_text(fig)}); each run's median step over its timed steps:",
            "", "| group | GPUs | runs' median step | mean | speed-up | distinct losses | peak memory |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, g in fig["groups"].items():
        label = f"{name} (steps {g['timed_steps'][0]}-{g['timed_steps'][1]})"
        if "one_gpu_of" in g:
            label += f", against the one GPU of {g['one_gpu_of']} (configuration differs in {', '.join(g['differs_from_it']) or 'nothing'})"
        for r in g["per_gpus"]:
            steps = ", ".join(f"{x['median_step_ms']:.2f}" + (" (profiled)" if x.get("profiled") else "")
                              for x in g["runs"] if x["gpus"] == r["gpus"])
            sp = f"**{r['speedup']:.3f}x**" if "speedup" in r else "-"
            peaks = ", ".join(str(x["peak_mib"]) for x in g["runs"] if x["gpus"] == r["gpus"])
            rows.append(f"| {label} | {r['gpus']} | {steps} ms | {r['mean_step_ms']:.2f} ms | {sp} | {r['distinct_losses']} of {r['runs']} "
                        f"| {peaks} MiB |")
    losses = "; ".join(f"{x['gpus']} GPU(s), {x['steps']} steps: {x['runs']} run(s), {x['distinct']} distinct"
                       for x in fig["loss_sequences"])
    rows += ["", f"Distinct loss sequences (every loss to the bit) over the record's runs: {losses}."]
    return "\n".join(rows) + "\n"
