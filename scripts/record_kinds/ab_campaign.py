"""Record kind ab_campaign: logs/VARIANT_gN_rI.txt, each with its JSON lines (.jsonl), as
scripts/ab_run.py writes them (with its campaign.json, where it ran them). The logs are read and
checked by scripts/ab_report.py's own code (load: every refusal of its docstring), and the
statistics are scripts/ab_stats.py's. record.json, beside "kind" and "question":
  "data"        what data the runs read, in words (their configurations name the shards' paths);
  "variants"    optional: the variants' order, the first the baseline (campaign.json's order
                where there is one, else this; without either, alphabetical);
  "compare"     optional: [[VARIANT, BASELINE, "paired" or "unpaired"], ...]; default each variant
                against the first, paired by seed (one trainer with a flag flipped: one seed gives
                both the same start);
  "loss_only"   optional: true for runs that shared a GPU, whose times are no speed figure;
  "provenance"  optional: {VARIANT: words} for a variant whose logs name no clean commit (what
                code they ran, as far as is known), printed beside its figures.
Figures: the card; per group (variant and GPU count) its code (commit and source digest, or its
provenance), runs, seeds, whether its mask leaks targets, the final validation loss's mean and standard deviation, the step average's (not
with loss_only), and each validation step's; per comparison at each GPU count the differences of
the means with Welch's two-sided p, at the end and at every validation step, and for a paired one
the pairs, the paired t-test (mean and standard deviation of the differences, two-sided p) and
how many pairs' loss sequences are identical to the bit.
A run that diverged, stopped early or holds a figure that is no plain finite decimal is refused,
named (scripts/ab_report.py would leave it out of its report and say so; a record holds none).
"""
import math
import os
import re
import sys

from tool_errors import ToolError
from record_kinds.common import checked_source, known_commit, read_text

KIND = "ab_campaign"
FIRST_LINE = re.compile(r"run_id:(\S+) (\S+)(?: (\S+))?(?: source:(\S+))?$")
STEP_LINE = re.compile(r"step:\d+/\d+ ")
PLAIN = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:ms)?")


def _plain_numbers(path):
    """ToolError, naming the line, where a step line's figure is no plain decimal: a value that is
    not finite, an exponent, a typed word (the step average reads nanms before it is defined)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not STEP_LINE.match(line):
                continue
            for word in line.split()[1:]:
                key, _, value = word.partition(":")
                if key in ("val_loss", "train_loss", "train_time", "step_avg") and not PLAIN.fullmatch(value) and \
                        not (key == "step_avg" and value == "nanms"):
                    raise ToolError(f"{path}:{n}: {key} {value[:40]!r} is not a plain finite decimal")


def _modules():
    """scripts/ab_report.py and scripts/ab_stats.py, imported when a record of this kind is read
    (they need numpy, scipy and statsmodels, and say so where they are missing)."""
    scripts = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import ab_report
    import ab_stats
    return ab_report, ab_stats


def _r(x, digits):
    """A figure rounded (so that it recomputes alike wherever scipy rounds its last bits), or None
    where it is not defined (fewer than 2 runs)."""
    return round(float(x), digits) if x is not None and math.isfinite(x) else None


def _p(p):
    return float(f"{p:.4g}") if p is not None and math.isfinite(p) else None


def _code(rec, meta, variant, rs):
    """A group's code: (commit, source digest) from its runs' configurations and first lines, or
    (None, None) for a variant record.json gives a provenance for; ToolError otherwise."""
    commits, sources = set(), set()
    for r in rs:
        where = f"{r.json_path}:1"
        commit = r.config.get("git_commit")
        with open(r.path, encoding="utf-8", errors="replace") as f:
            first = f.readline().rstrip("\n")
        m = FIRST_LINE.match(first)
        if m and m.group(3) is not None and m.group(3) != commit:
            raise ToolError(f"{r.path}:1: commit {m.group(3)} where its JSON lines' git_commit reads {commit!r}: one run names "
                            "one code")
        sources.add(m.group(4) if m else None)
        commits.add((commit, where, r.path))
    provenance = (meta.get("provenance") or {}).get(variant)
    if provenance is not None:
        if not isinstance(provenance, str) or not provenance.strip():
            raise ToolError(f"{rec}/record.json: provenance of {variant} is not a sentence")
        return None, None, provenance
    names = {c for c, _, _ in commits}
    if len(names) != 1:
        raise ToolError(f"{rec}/logs: the runs of {variant} name {len(names)} commits: a group is one code")
    for c, where, path in commits:
        known_commit(c if isinstance(c, str) else "", where, path)
    return names.pop(), checked_source(rec, sources, f"{rec}/logs ({variant})"), None


def _order(rec, meta, groups, campaign):
    variants = meta.get("variants")
    if variants is None or campaign is not None:
        return groups
    found = {v for v, _ in groups}
    if not (isinstance(variants, list) and all(isinstance(v, str) for v in variants) and set(variants) == found):
        raise ToolError(f"{rec}/record.json: variants {variants!r} are not the variants of the logs ({', '.join(sorted(found))})")
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][1], variants.index(kv[0][0]))))


def _comparisons(rec, meta, variants):
    compare = meta.get("compare")
    if compare is None:
        return [(v, variants[0], True) for v in variants[1:]]
    out = []
    for c in compare if isinstance(compare, list) else [None]:
        if not (isinstance(c, list) and len(c) == 3 and c[0] in variants and c[1] in variants and c[0] != c[1]
                and c[2] in ("paired", "unpaired")):
            raise ToolError(f"{rec}/record.json: compare entry {c!r} is not [VARIANT, BASELINE, \"paired\" or \"unpaired\"] "
                            f"of the variants {', '.join(variants)}")
        out.append((c[0], c[1], c[2] == "paired"))
    return out


def compute(rec, meta):
    ab_report, st = _modules()
    logs = os.path.join(rec, "logs")
    for name in ("data", "question"):
        if not isinstance(meta.get(name), str) or not meta[name].strip():
            raise ToolError(f"{rec}/record.json: no {name!r} (a sentence: " +
                            ("what data the runs read" if name == "data" else "what the record answers") + ")")
    loss_only = meta.get("loss_only", False)
    if not isinstance(loss_only, bool):
        raise ToolError(f"{rec}/record.json: loss_only {loss_only!r} is not true or false")
    groups, campaign = ab_report.discover(logs)
    if not groups:
        raise ToolError(f"{logs}: no VARIANT_gN_rI.txt log")
    groups = _order(rec, meta, groups, campaign)
    runs, _, _ = ab_report.load(groups, campaign)
    for rs in runs.values():
        for r in rs:
            if not r.config:
                raise ToolError(f"{r.path}: no JSON lines beside it: its seed, card and commit are not known")
            if r.seed is None:
                raise ToolError(f"{r.json_path}:1: no seed in its configuration: runs are paired and named by seed")
            _plain_numbers(r.path)
            why = ab_report.why_left_out(r, loss_only)
            if why:
                raise ToolError(f"{r.path}: {why}: a record's runs all complete, their figures finite")
    variants = list(dict.fromkeys(v for v, _ in runs))
    by_variant = {}
    for (v, _), rs in runs.items():
        by_variant.setdefault(v, []).extend(rs)
    cards = {r.config.get("gpu") for rs in runs.values() for r in rs}
    if len(cards) != 1 or not isinstance(next(iter(cards)), str):
        raise ToolError(f"{logs}: the runs name {len(cards)} cards: a record is one card")
    data = {(r.config.get("train_data"), r.config.get("val_data")) for rs in runs.values() for r in rs}
    if len(data) != 1:
        raise ToolError(f"{logs}: the runs read {len(data)} different data (train_data, val_data): a record is one data")
    train_data, val_data = data.pop()
    fig = {"kind": KIND, "card": cards.pop(), "train_data": train_data, "val_data": val_data, "data": meta["data"].strip()}
    if campaign is not None:
        ran = {key: [r.seed for r in rs] for key, rs in runs.items()}
        fig["campaign"] = ab_report.campaign_record.status(campaign, ran)[0] or "complete"
    codes = {v: _code(rec, meta, v, by_variant[v]) for v in variants}
    unknown = set((meta.get("provenance") or {})) - set(variants)
    if unknown:
        raise ToolError(f"{rec}/record.json: provenance names {', '.join(sorted(unknown))}, no variant of the logs")
    fig["code"] = {v: ({"commit": c, **({"source": s} if s else {})} if p is None else {"provenance": p})
                   for v, (c, s, p) in codes.items()}
    metrics = [("final_val_loss", lambda r: r.final_val_loss, 6)]
    if not loss_only:
        metrics.append(("step_avg_ms", lambda r: r.step_avg_ms, 3))
    used, fig["groups"] = {}, []
    for (v, gpus), rs in runs.items():
        done = used[(v, gpus)] = rs  # every run (the others are refused above)
        g = {"variant": v, "gpus": gpus, "runs": len(rs), "seeds": sorted(r.seed for r in rs),
             "leaks_targets": ab_report.leak_status(rs)[0]}
        for name, get, d in metrics:
            xs = [get(r) for r in done]
            g[name] = {"mean": _r(st.mean(xs), d) if xs else None, "std": _r(st.std(xs), d + 1) if len(xs) > 1 else None,
                       "values": [_r(x, d) for x in xs]}
        steps = sorted(set.intersection(*[{s for s, _, _ in r.val} for r in done])) if done else []
        g["val_steps"] = [{"step": s, "mean": _r(st.mean(xs), 6), "std": _r(st.std(xs), 7) if len(xs) > 1 else None}
                          for s in steps for xs in [[dict((k, x) for k, x, _ in r.val)[s] for r in done]]]
        fig["groups"].append(g)
    fig["comparisons"] = []
    for gpus in sorted({g for _, g in runs}):
        for v, base, paired in _comparisons(rec, meta, variants):
            if (v, gpus) not in used or (base, gpus) not in used:
                continue
            a, b = used[(v, gpus)], used[(base, gpus)]
            c = {"variant": v, "baseline": base, "gpus": gpus}
            for name, get, d in metrics:
                x, y = [get(r) for r in a], [get(r) for r in b]
                c[name] = {"difference": _r(st.mean(x) - st.mean(y), d) if x and y else None, "welch_p": _p(st.welch(x, y)[2])}
            cx = [dict((s, l) for s, l, _ in r.val) for r in a]
            cy = [dict((s, l) for s, l, _ in r.val) for r in b]
            steps = sorted(set.intersection(*[set(k) for k in cx + cy])) if cx and cy else []
            c["val_steps"] = [{"step": s, "difference": _r(st.mean(x) - st.mean(y), 6), "welch_p": _p(st.welch(x, y)[2])}
                              for s in steps for x, y in [([k[s] for k in cx], [k[s] for k in cy])]]
            if paired:
                sa, sb = {r.seed: r for r in a}, {r.seed: r for r in b}
                both = sorted(set(sa) & set(sb))
                m, sd, _, _, p = st.paired([sa[s].final_val_loss for s in both], [sb[s].final_val_loss for s in both])
                verdicts = [ab_report.identical(sb[s], sa[s]) for s in both]
                c["paired"] = {"pairs": len(both), "mean_difference": _r(m, 6), "std_difference": _r(sd, 7), "p": _p(p),
                               "identical_to_the_bit": sum(x == "yes" for x in verdicts),
                               "not_identical": sum(x == "no" for x in verdicts),
                               "not_known": sum(x not in ("yes", "no") for x in verdicts)}
            fig["comparisons"].append(c)
    return fig


def _ms(x, d):
    """A difference as a page prints it, signed."""
    return "n/a" if x is None else f"{x:+.{d}f}"


def _pm(m, d):
    """mean +- std as a page prints it."""
    return "n/a" if m["mean"] is None else f"{m['mean']:.{d}f}" + (f" +- {m['std']:.{d}f}" if m["std"] is not None else " (1 run)")


def _pt(p):
    return "n/a" if p is None else f"{p:.4f}" if p >= 1e-4 else f"{p:.2g}"


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    codes = fig["code"]
    same = len({str(c) for c in codes.values()}) == 1

    def code_text(c):
        if "provenance" in c:
            return f"no commit in its logs: {c['provenance']}"
        return f"commit {c['commit']}" + (f", source {c['source'][:12]}" if c.get("source") else ", no source digest")
    head = f"Record `results/records/{rec_name}` ({fig['card']}; "
    head += code_text(next(iter(codes.values()))) if same else "; ".join(f"{v}: {code_text(c)}" for v, c in codes.items())
    head += f"; data: {fig['data']}" + (f"; campaign {fig['campaign']}" if "campaign" in fig else "") + "):"
    timed = "step_avg_ms" in fig["groups"][0]
    rows = [head, "", "| variant | GPUs | runs | seeds | final val loss, mean +- std |" + (" step avg ms, mean +- std |" if timed else ""),
            "| --- | --- | --- | --- | --- |" + (" --- |" if timed else "")]
    for g in fig["groups"]:
        seeds = g["seeds"]
        seeds_text = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))) \
            else ", ".join(map(str, seeds))
        name = g["variant"] + (" (leaks targets)" if g["leaks_targets"] else "")
        rows.append(f"| {name} | {g['gpus']} | {g['runs']} | {seeds_text} | {_pm(g['final_val_loss'], 4)} |" +
                    (f" {_pm(g['step_avg_ms'], 2)} |" if timed else ""))
    if fig["comparisons"]:
        rows += ["", "| variant - baseline | GPUs | final val loss difference (Welch p) |" + (" step avg difference, ms (Welch p) |" if timed else "") +
                 " paired by seed: pairs, mean +- std of differences (p) | loss sequences identical to the bit |",
                 "| --- | --- | --- |" + (" --- |" if timed else "") + " --- | --- |"]
        for c in fig["comparisons"]:
            fl = c["final_val_loss"]
            row = f"| {c['variant']} - {c['baseline']} | {c['gpus']} | {_ms(fl['difference'], 4)} ({_pt(fl['welch_p'])}) |"
            if timed:
                row += f" {_ms(c['step_avg_ms']['difference'], 2)} ({_pt(c['step_avg_ms']['welch_p'])}) |"
            p = c.get("paired")
            if p is None:
                row += " not paired | not compared |"
            else:
                dd = ("n/a (fewer than 2 pairs)" if p["mean_difference"] is None or p["std_difference"] is None else
                      f"{p['mean_difference']:+.4f} +- {p['std_difference']:.4f} ({_pt(p['p'])})")
                row += f" {p['pairs']}, {dd} | {p['identical_to_the_bit']} of {p['pairs']}" + \
                    (f" ({p['not_known']} not known)" if p["not_known"] else "") + " |"
            rows.append(row)
    # validation loss at each step, per GPU count: each group's mean +- std, and the comparisons' differences
    for gpus in sorted({g["gpus"] for g in fig["groups"]}):
        gs = [g for g in fig["groups"] if g["gpus"] == gpus]
        cs = [c for c in fig["comparisons"] if c["gpus"] == gpus]
        steps = [s["step"] for s in gs[0]["val_steps"]]
        if len(steps) < 2:
            continue
        rows += ["", f"| step ({gpus} GPU{'s' if gpus > 1 else ''}) | " + " | ".join(g["variant"] for g in gs) + " | " +
                 " | ".join(f"{c['variant']} - {c['baseline']} (p)" for c in cs) + " |",
                 "| --- |" + " --- |" * (len(gs) + len(cs))]
        for s in steps:
            cells = []
            for g in gs:
                v = next((x for x in g["val_steps"] if x["step"] == s), None)
                cells.append("n/a" if v is None else _pm(v, 4))
            for c in cs:
                v = next((x for x in c["val_steps"] if x["step"] == s), None)
                cells.append("n/a" if v is None else f"{v['difference']:+.4f} ({_pt(v['welch_p'])})")
            rows.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
