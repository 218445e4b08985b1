#!/usr/bin/env python3
"""Comparison report for an ablation: per variant and GPU count, the mean, standard deviation and
95% confidence interval of final validation loss, training time and step average; Welch's t-test
of each variant against the first; whether paired runs (same run index, hence same seed) give
identical loss sequences; the validation loss at every validation step, with the same test; a
markdown table and two PNG plots (validation loss with a +-1 std band; step-time distributions).
Works for any flag: a variant is just a name. --loss-only leaves the times out, for runs that
shared a GPU.

    python3 scripts/ab_report.py --logs-dir logs/mask/causal --out results/mask_ablation/causal
        (logs named VARIANT_gN_rI.txt, as scripts/ab_run.py writes them)
    python3 scripts/ab_report.py --group 'uni@8=logs/a/*.txt' --group 'bi@8=logs/b/*.txt' --out DIR
"""
import argparse
import glob
import math
import os
import re
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_stats as st  # noqa: E402
import speedrun_logs  # noqa: E402
from tool_errors import ToolError, regular_file, run as run_tool  # noqa: E402

NAME_RE = re.compile(r"^(?P<variant>.+)_g(?P<gpus>\d+)_r(?P<run>\d+)\.txt$")


def discover(logs_dir):
    """Groups VARIANT_gN_rI.txt logs; variants in the order of the runner's campaign.json (the
    first is the baseline), else alphabetical."""
    if not os.path.isdir(logs_dir):
        raise ToolError(f"--logs-dir {logs_dir}: not a folder")
    found = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(logs_dir), "*.txt"))):
        m = NAME_RE.match(os.path.basename(path))
        if m:
            found.setdefault((m["variant"], int(m["gpus"])), []).append((int(m["run"]), path))
    order = sorted({v for v, _ in found})
    manifest = os.path.join(logs_dir, "campaign.json")
    if os.path.exists(manifest):
        import json
        try:
            listed = [v[0] for v in json.load(open(regular_file(manifest, "campaign record")))["variants"]]
        except (json.JSONDecodeError, KeyError, TypeError, IndexError) as e:
            raise ToolError(f"{manifest}: not a campaign record of scripts/ab_run.py ({e})")
        order = [v for v in listed if v in order] + [v for v in order if v not in listed]
    groups = OrderedDict()
    for gpus in sorted({g for _, g in found}):
        for v in order:
            if (v, gpus) in found:
                groups[(v, gpus)] = sorted(found[(v, gpus)])
    return groups


def from_patterns(specs):
    groups = OrderedDict()
    for spec in specs:
        if "=" not in spec or "@" not in spec.split("=", 1)[0]:
            raise ToolError(f"--group wants NAME@GPUS=PATTERN, got {spec!r}")
        name, pattern = spec.split("=", 1)
        variant, gpus = name.rsplit("@", 1)
        if not variant or not gpus.isdigit() or int(gpus) < 1:
            raise ToolError(f"--group {spec!r}: want a non-empty NAME and a positive whole GPUS in NAME@GPUS")
        key = (variant, int(gpus))
        if key in groups:  # two groups of one name would be merged and one of them lost
            raise ToolError(f"--group {spec!r}: the group {variant}@{gpus} is given twice; give each group a name of its own")
        files = sorted(glob.glob(pattern))
        if not files:
            raise ToolError(f"--group {spec!r}: pattern matches no file")
        groups[key] = list(enumerate(files))
    return groups


def fmt(x, digits=4):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def loss_sequence(run):
    """The losses to compare bit for bit: full precision from the JSON lines when the trainer
    wrote them, else the printed values."""
    side = os.path.splitext(run.path)[0] + ".jsonl"
    if os.path.exists(side):
        import json
        seq = []
        with open(side) as f:
            for line in f:
                ev = json.loads(line)
                for key in ("train_loss", "val_loss"):
                    if key in ev:
                        seq.append((ev.get("step"), key, ev[key]))
        if seq:
            return seq
    return [(s, "val", v) for s, v, _ in run.val] + [(s, "train", l) for s, _, _, l in run.train if not math.isnan(l)]


def detectability(runs_by_group, values, metrics, by_gpus, differences):
    """Rows of the section 'How much these runs can see', per metric and GPU count."""
    lines = ["", "How much these runs can see (two-sided test at the 5% level, 80% power, the noncentral t: "
             "statsmodels). Per group: its runs' standard deviation; the smallest true difference a comparison "
             "with the first variant can find with the runs at hand (pooled spread, the smaller count a side); "
             "what 15 runs a side would find at this spread; and the runs a side needed to find a difference of "
             + " or ".join(f"{d:g}%" for d in differences) + " of the mean.", "",
             "| GPUs | variant | metric | runs | std | std (% of mean) | detectable now | detectable with 15 a side | "
             + " | ".join(f"runs for {d:g}%" for d in differences) + " |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in differences) + " |"]
    for gpus, variants in by_gpus.items():
        base = variants[0]
        for variant in variants:
            for name, _, d in metrics:
                xs, ys = values[(variant, gpus, name)], values[(base, gpus, name)]
                if len(xs) < 2:
                    continue
                m, sd = st.mean(xs), st.std(xs)
                pooled = st.pooled_std(xs, ys) if variant != base and len(ys) >= 2 else sd
                now = st.detectable_difference(pooled, min(len(xs), len(ys)) if variant != base else len(xs))
                at15 = st.detectable_difference(sd, 15)
                pct = lambda v: f"{v:.{d}f} ({100 * v / abs(m):.2f}%)" if m and math.isfinite(v) else fmt(v, d)
                need = [str(st.runs_needed(dd / 100 * abs(m), sd)) if sd > 0 and m else "-" for dd in differences]
                lines.append(f"| {gpus} | {variant} | {name} | {len(xs)} | {fmt(sd, d + 1)} | "
                             f"{100 * sd / abs(m):.3f}% | {pct(now)} | {pct(at15)} | " + " | ".join(need) + " |")
    return lines


def val_steps_table(runs, by_gpus):
    """Validation loss at every step that all complete runs of a GPU count validated at: each
    variant's mean and standard deviation, and Welch's test of each variant against the first."""
    lines = ["", "Validation loss at each validation step (mean +- standard deviation over the runs; Welch's two-sided p "
             "of each variant against the first).", ""]
    for gpus, variants in by_gpus.items():
        curves = {v: [dict((s, x) for s, x, _ in r.val) for _, r in runs[(v, gpus)] if r.complete and math.isfinite(r.final_val_loss)]
                  for v in variants}
        every = [set(c) for cs in curves.values() for c in cs]
        if not every:
            continue
        steps = sorted(set.intersection(*every))
        base = variants[0]
        if lines[-1]:
            lines.append("")
        lines += [f"| GPUs | step | " + " | ".join(variants) + " | " + " | ".join(f"{v} - {base} (p)" for v in variants[1:]) + " |",
                  "|" + " --- |" * (2 + 2 * len(variants) - 1)]
        for s in steps:
            vals = {v: [c[s] for c in curves[v]] for v in variants}
            cells = [f"{fmt(st.mean(x))} +- {fmt(st.std(x))}" if x else "-" for x in vals.values()]
            diffs = []
            for v in variants[1:]:
                x, y = vals[v], vals[base]
                diffs.append(f"{fmt(st.mean(x) - st.mean(y))} ({fmt(st.welch(x, y)[2], 3)})" if x and y else "-")
            lines.append(f"| {gpus} | {s} | " + " | ".join(cells + diffs) + " |")
    return lines


def build(groups, out_dir, title, differences=(0.2, 0.4), loss_only=False):
    os.makedirs(out_dir, exist_ok=True)
    runs = OrderedDict((key, [(i, speedrun_logs.parse(p)) for i, p in items]) for key, items in groups.items())
    metrics = [("final val loss", lambda r: r.final_val_loss, 4), ("train time (s)", lambda r: r.train_time_ms / 1e3, 2),
               ("step avg (ms)", lambda r: r.step_avg_ms, 2)]
    if loss_only:  # runs that shared a GPU, or otherwise not timed alone: their times say nothing
        metrics = metrics[:1]
    lines = [f"# {title}", "", "Per variant and GPU count, over complete runs (mean, standard deviation, half-width of the 95% "
             "confidence interval of the mean).", "",
             "| variant | GPUs | runs (complete) | " + " | ".join(f"{m} mean | std | 95% CI" for m, _, _ in metrics) + " |",
             "|" + " --- |" * (3 + 3 * len(metrics))]
    values = {}
    left_out = []  # runs not in the statistics, each named with the reason
    for (variant, gpus), rs in runs.items():
        done = []
        for i, r in rs:
            if not r.complete:
                left_out.append(f"| {variant} | {gpus} | {r.path} | incomplete: no final validation (stopped at step "
                                f"{r.train[-1][0] if r.train else 0} of {r.total_steps}) |")
            elif not all(math.isfinite(x) for x in ((r.final_val_loss,) if loss_only else (r.final_val_loss, r.train_time_ms, r.step_avg_ms))):
                left_out.append(f"| {variant} | {gpus} | {r.path} | final val loss {r.final_val_loss}, train time "
                                f"{r.train_time_ms} ms: not finite (diverged?) |")
            else:
                done.append(r)
        row = [variant, str(gpus), f"{len(rs)} ({len(done)})"]
        for name, get, d in metrics:
            xs = [get(r) for r in done]
            values[(variant, gpus, name)] = xs
            row += [fmt(st.mean(xs), d) if xs else "-", fmt(st.std(xs), d) if xs else "-", fmt(st.ci95(xs), d) if xs else "-"]
        lines.append("| " + " | ".join(row) + " |")
    if not loss_only:
        n_json = sum(r.times_from_json for rs in runs.values() for _, r in rs)
        n_all = sum(len(rs) for rs in runs.values())
        lines += ["", f"Times: {n_json} of {n_all} runs from their JSON lines (to the microsecond), the rest from the text "
                      "log (whole milliseconds)."]
    if left_out:
        lines += ["", f"**{len(left_out)} run(s) left out of the statistics:**", "", "| variant | GPUs | log | why |",
                  "| --- | --- | --- | --- |"] + left_out
        for row in left_out:
            print("ab_report: warning: left out " + " ".join(c.strip() for c in row.strip("|").split("|")), file=sys.stderr)
    lines += ["", "Welch's t-test of each variant against the first variant at the same GPU count (two-sided p).", "",
              "| GPUs | variant | vs | metric | difference of means | t | p |", "| --- | --- | --- | --- | --- | --- | --- |"]
    by_gpus = OrderedDict()
    for variant, gpus in runs:
        by_gpus.setdefault(gpus, []).append(variant)
    identical_rows, paired_rows = [], []
    for gpus, variants in by_gpus.items():
        base = variants[0]
        for other in variants[1:]:
            for name, _, d in metrics:
                x, y = values[(other, gpus, name)], values[(base, gpus, name)]
                t, df, p = st.welch(x, y)
                diff = st.mean(x) - st.mean(y) if x and y else math.nan
                lines.append(f"| {gpus} | {other} | {base} | {name} | {fmt(diff, d)} | {fmt(t, 2)} | {fmt(p, 4)} |")
            a = dict(runs[(base, gpus)])
            b = dict(runs[(other, gpus)])
            both = [i for i in sorted(set(a) & set(b)) if a[i].complete and b[i].complete]
            if len(both) >= 2:
                m, sd, t, df, p = st.paired([b[i].final_val_loss for i in both], [a[i].final_val_loss for i in both])
                paired_rows.append(f"| {gpus} | {other} | {base} | {len(both)} | {fmt(m)} | {fmt(sd)} | {fmt(t, 2)} | {fmt(p, 4)} |")
            for i in sorted(set(a) & set(b)):
                same = loss_sequence(a[i]) == loss_sequence(b[i]) and bool(loss_sequence(a[i]))
                identical_rows.append(f"| {gpus} | {base} vs {other} | {i} | {'yes' if same else 'no'} |")
    lines += ["", "Final validation loss paired by run index (the same seed; a fair pairing only where one seed gives both "
              "variants the same start, as in one trainer with a flag flipped): mean and standard deviation of the "
              "differences, paired t-test (two-sided p).", "",
              "| GPUs | variant | vs | pairs | mean difference | std of differences | t | p |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"] + paired_rows
    lines += val_steps_table(runs, by_gpus)
    lines += detectability(runs, values, metrics, by_gpus, differences)
    lines += ["", "Loss sequences, paired by run index (same seed): identical to the bit?", "",
              "| GPUs | variants | run | identical |", "| --- | --- | --- | --- |"] + identical_rows
    plots = make_plots(runs, out_dir, times=not loss_only)
    if plots:
        lines += [""] + [f"![{name}]({name})" for name in plots]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(text)
    return text


def make_plots(runs, out_dir, times=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        print("ab_report: matplotlib/numpy missing: no plots (scripts/setup.sh installs them)", file=sys.stderr)
        return []
    fig, ax = plt.subplots(figsize=(8, 5))
    for (variant, gpus), rs in runs.items():
        curves = [dict((s, v) for s, v, _ in r.val) for _, r in rs if r.val and all(math.isfinite(v) for _, v, _ in r.val)]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        ys = np.array([[c[s] for s in steps] for c in curves])
        m, sd = ys.mean(0), ys.std(0, ddof=1) if len(curves) > 1 else np.zeros(len(steps))
        line, = ax.plot(steps, m, label=f"{variant}, {gpus} GPU ({len(curves)} runs)")
        ax.fill_between(steps, m - sd, m + sd, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "val_loss.png"), dpi=110)
    plt.close(fig)
    if not times:
        return ["val_loss.png"]
    fig, ax = plt.subplots(figsize=(8, 5))
    data, labels = [], []
    for (variant, gpus), rs in runs.items():
        times = [t for _, r in rs for t in r.step_times_ms() if math.isfinite(t)]
        if times:
            data.append(times)
            labels.append(f"{variant}\n{gpus} GPU")
    if data:
        ax.boxplot(data, showfliers=False)
        ax.set_xticks(range(1, len(labels) + 1), labels)
        ax.set_ylabel("step time (ms), steps after the 10th")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "step_times.png"), dpi=110)
    plt.close(fig)
    return ["val_loss.png", "step_times.png"] if data else ["val_loss.png"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs-dir", help="directory of VARIANT_gN_rI.txt logs")
    ap.add_argument("--group", action="append", default=[], help="NAME@GPUS=GLOB (repeatable)")
    ap.add_argument("--out", required=True, help="output directory for report.md and the plots")
    ap.add_argument("--title", default="Ablation report")
    ap.add_argument("--difference", type=float, action="append",
                    help="a difference, in %% of the mean, to say how many runs would find (repeatable; default 0.2 and 0.4)")
    ap.add_argument("--loss-only", action="store_true",
                    help="compare losses only: for runs that were not timed alone (several sharing a GPU)")
    a = ap.parse_args(argv)
    if bool(a.logs_dir) == bool(a.group):
        ap.error("give exactly one of --logs-dir or --group")
    groups = discover(a.logs_dir) if a.logs_dir else from_patterns(a.group)
    if not groups:
        raise ToolError(f"no logs named VARIANT_gN_rI.txt in {a.logs_dir}")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        raise ToolError(f"--out {a.out}: exists and is not a folder")
    diffs = a.difference or [0.2, 0.4]
    if any(not (math.isfinite(d) and 0 < d < 100) for d in diffs):
        raise ToolError(f"--difference wants percentages between 0 and 100, got {diffs}")
    print(build(groups, a.out, a.title, diffs, a.loss_only))
    return 0


if __name__ == "__main__":
    run_tool(main, "ab_report")
