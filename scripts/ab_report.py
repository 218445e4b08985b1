#!/usr/bin/env python3
"""Comparison report for an ablation: per variant and GPU count, the mean, standard deviation and
95% confidence interval of final validation loss, training time and step average; Welch's t-test
of each variant against the first; the paired t-test and whether the loss sequences are identical
for the runs of one seed; the validation loss at every validation step, with the same test; how
many runs a side a difference would need; a markdown table and two PNG plots (validation loss
with a +-1 std band; step times, one panel per GPU count, with each variant's difference from the
first and its 95% confidence interval). Works for any flag: a variant is just a name. --loss-only
leaves the times out, for runs that shared a GPU.

A run is what its own logs say, not what its file is called: its run id, its configuration (the
JSON lines beside the text log: flags, seed, GPU count), and the steps it logged. Before writing
anything the report checks every log, and refuses (exit 1, one line per log at fault, nothing
written) when
  - a log is incomplete: a training step of 1..N missing, stopped before step N, or no
    validation at step N (except a run that stopped at a loss logged as diverged: below);
  - its JSON lines are another run's (run id, steps, losses or times that disagree);
  - two files hold one run (one run id, or the same text), or a group holds one seed twice;
  - a run's configuration disagrees with its group's (another campaign's log: other steps, data,
    validation tokens, GPU, commit, ...), its GPU count with the group's, or, with the campaign's
    record (campaign.json), its flags with the variant's;
  - with campaign.json, the variants differ in a setting that is none of their flags;
  - campaign.json is not ab_run's record (every field checked: scripts/campaign_record.py).
With campaign.json the report states the campaign's plan (variants x GPU counts x seeds), how
many of its runs ran and which are missing; a report of a partial campaign says "partial" in its
first line.
Runs whose log records a loss as diverged (train_gpt's diverged(nan), diverged(inf),
diverged(-inf), where it stops the run) are counted, named with the step and loss, and left out
of the statistics, as are complete runs whose final loss or times are not finite. Runs of one GPU
count are paired by the seed in their configuration (never
by their file names). --allow-differ KEY accepts differing values of one configuration entry
(named in the report).

A variant whose mask lets a prediction see its own target (train_gpt's configuration says
leaks_targets yes, or, in logs from before it said so, causal 0) is named in the report's first
lines: its loss measures copying, not language modelling.

--target-loss [L] adds the record check of modded-nanogpt (L = 3.28 when given alone): per group,
the one-sided p that its mean final validation loss is below L (scipy.stats.ttest_1samp(losses,
L, alternative='less'), as the records state it), passing at p < 0.01; its runs, all counted, the
diverged ones named (a run that diverged fails the group: a record counts every run); the mean
and 95% confidence interval of its training time and step average, with Welch's two-sided p
against the first variant at the same GPU count; and the smallest n that would pass: the
smallest n for which n runs of exactly the observed mean and standard deviation give p < 0.01.
The report's first line is the verdict, e.g. "mean 3.2787 over 14 runs, p = 0.0059 < 0.01:
passes". A variant whose mask leaks targets is refused; one run, or runs all of one loss (no
spread: the t-test is undefined), are stated as not judged.

    python3 scripts/ab_report.py --logs-dir logs/mask/causal --out results/mask_ablation/causal
        (logs named VARIANT_gN_rI.txt, as scripts/ab_run.py writes them)
    python3 scripts/ab_report.py --group 'uni@8=logs/a/*.txt' --group 'bi@8=logs/b/*.txt' --out DIR
"""
import argparse
import glob
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, require, run as run_tool  # noqa: E402

require("numpy", "scipy", "statsmodels")
import ab_stats as st  # noqa: E402
import campaign_record  # noqa: E402
import speedrun_logs  # noqa: E402

NAME_RE = re.compile(r"^(?P<variant>.+)_g(?P<gpus>\d{1,6})_r(?P<run>\d{1,9})\.txt$")
from speedrun_logs import DERIVED, PER_RUN, flag_settings, same_value, setting  # noqa: E402
OUTPUTS = ("report.md", "val_loss.png", "step_times.png", "removals.png")  # what a report writes into --out
# train_gpt's configuration entry saying whether the mask lets a prediction see its own target
# (model/target_leak.h); it follows from the flags (speedrun_logs.DERIVED), so variants may differ
# in it without declaring it
LEAK_KEY = "leaks_targets"
DEFAULT_TARGET = 3.28  # modded-nanogpt's short track: the mean final validation loss to beat


def md(text):
    """Text for a markdown table cell: '|' escaped, line breaks as spaces."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def one_line(text):
    return str(text).replace("\r", " ").replace("\n", " ")


def group_name(key):
    return f"{key[0]}@{key[1]}"


class Problems:
    """Everything wrong with the logs, gathered so that one run of the report names all of it."""

    def __init__(self):
        self.lines = []

    def add(self, text):
        if text not in self.lines:
            self.lines.append(one_line(text))

    def stop_if_any(self):
        if self.lines:
            for line in self.lines[:-1]:
                print(f"ab_report: error: {line}", file=sys.stderr)
            more = f" ({len(self.lines)} problems, each on a line of its own; no report written)" if len(self.lines) > 1 else \
                " (no report written)"
            raise ToolError(self.lines[-1] + more)


# ------------------------------------------------------------------------------------ the groups
def discover(logs_dir):
    """Groups VARIANT_gN_rI.txt logs by variant and GPU count; variants in the order of the
    runner's campaign.json (the first is the baseline), else alphabetical. Returns the groups and
    the campaign record (None without one)."""
    if not os.path.isdir(logs_dir):
        raise ToolError(f"--logs-dir {logs_dir}: not a folder")
    found = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(logs_dir), "*.txt"))):
        m = NAME_RE.match(os.path.basename(path))
        if m:
            if int(m["gpus"]) < 1:
                raise ToolError(f"{path}: a GPU count of {m['gpus']} in its name (VARIANT_gN_rI.txt wants N of 1 or more)")
            found.setdefault((m["variant"], int(m["gpus"])), []).append(path)
    order = sorted({v for v, _ in found})
    record = None
    manifest = os.path.join(logs_dir, "campaign.json")
    if os.path.exists(manifest):
        record = campaign_record.read(manifest)  # every field checked; its plan for the report's first line
        listed = [v[0] for v in record["variants"]]
        order = [v for v in listed if v in order] + [v for v in order if v not in listed]
    groups = OrderedDict()
    for gpus in sorted({g for _, g in found}):
        for v in order:
            if (v, gpus) in found:
                groups[(v, gpus)] = found[(v, gpus)]
    return groups, record


def from_patterns(specs):
    groups = OrderedDict()
    for spec in specs:
        if "=" not in spec or "@" not in spec.split("=", 1)[0]:
            raise ToolError(f"--group wants NAME@GPUS=PATTERN, got {spec!r}")
        name, pattern = spec.split("=", 1)
        variant, gpus = name.rsplit("@", 1)
        if not variant or not gpus.isdigit() or len(gpus) > 6 or int(gpus) < 1:
            raise ToolError(f"--group {spec!r}: want a non-empty NAME and a positive whole GPUS in NAME@GPUS")
        key = (variant, int(gpus))
        if key in groups:  # two groups of one name would be merged and one of them lost
            raise ToolError(f"--group {spec!r}: the group {variant}@{gpus} is given twice; give each group a name of its own")
        files = sorted(glob.glob(pattern))
        if not files:
            raise ToolError(f"--group {spec!r}: pattern matches no file")
        groups[key] = files
    return groups


# ------------------------------------------------------------------------------------ the checks
def show(v):
    """A configuration value as the report prints it."""
    return "(absent)" if v is _ABSENT else json.dumps(v) if not isinstance(v, str) or not v else v


_ABSENT = object()


def check_runs(runs, record, allow, problems):
    """Refusals of section 1 of the docstring. runs: {group key: [Run]}. Returns the variant keys
    (the configuration entries that differ between groups) and {group key: setting}."""
    by_id, by_digest = {}, {}
    for key, rs in runs.items():
        g = group_name(key)
        for r in rs:
            state, why = r.state()
            if state == "incomplete":  # (a diverged run is counted, named and left out: build)
                problems.add(f"{r.path}: incomplete: {why}; finish the campaign (scripts/ab_run.py resumes it) or move the "
                             "log out of the report")
            if r.run_id:
                if r.run_id in by_id:
                    problems.add(f"{r.path} and {by_id[r.run_id]} are one run (run id {r.run_id}): a run counts once; "
                                 "remove the copy")
                by_id.setdefault(r.run_id, r.path)
            else:
                with open(r.path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                if digest in by_digest:
                    problems.add(f"{r.path} and {by_digest[digest]} are the same log: a run counts once; remove the copy")
                by_digest.setdefault(digest, r.path)
            if r.world_size is not None and r.world_size != key[1]:
                problems.add(f"{r.path}: ran on {r.world_size} GPU(s) (world_size in its configuration), but is in the group "
                             f"{g} of {key[1]} GPU(s)")
        with_cfg = [r for r in rs if r.config]
        if with_cfg and len(with_cfg) != len(rs):
            bare = next(r for r in rs if not r.config)
            problems.add(f"{bare.path}: no configuration (no JSON lines beside it), where {with_cfg[0].path} of the same group "
                         f"{g} has one: its settings cannot be checked")
            continue
        seeds = {}
        for r in rs:
            if r.seed is not None:
                if r.seed in seeds:
                    problems.add(f"{r.path} and {seeds[r.seed]}: the group {g} holds seed {r.seed} twice (a run redone or "
                                 "copied): runs are paired by seed and a seed counts once; move one aside")
                seeds.setdefault(r.seed, r.path)
        first = rs[0]
        s0 = setting(first, allow)
        for r in rs[1:]:
            s = setting(r, allow)
            diff = [k for k in sorted(set(s) | set(s0)) if s.get(k, _ABSENT) != s0.get(k, _ABSENT)]
            if diff:
                what = "; ".join(f"{k} {show(s.get(k, _ABSENT))} where {os.path.basename(first.path)} has "
                                 f"{show(s0.get(k, _ABSENT))}" for k in diff[:3]) + ("; ..." if len(diff) > 3 else "")
                problems.add(f"{r.path}: not a run of the group {g}'s configuration ({what}): a log of another campaign or "
                             "setting? (--allow-differ KEY accepts a difference)")
    settings = OrderedDict((key, {k: v for k, v in setting(rs[0], allow).items() if k != "world_size"})
                           for key, rs in runs.items())
    keys = sorted({k for s in settings.values() for k in s})
    varying = [k for k in keys if len({json.dumps(s.get(k, "\0absent"), sort_keys=True) for s in settings.values()}) > 1]
    # a variant is one configuration at every GPU count
    by_variant = OrderedDict()
    for (variant, gpus), s in settings.items():
        by_variant.setdefault(variant, []).append((gpus, s))
    for variant, items in by_variant.items():
        g0, s0 = items[0]
        for gpus, s in items[1:]:
            diff = [k for k in keys if s.get(k, _ABSENT) != s0.get(k, _ABSENT)]
            if diff:
                k = diff[0]
                problems.add(f"variant {variant}: {k} {show(s0.get(k, _ABSENT))} on {g0} GPU(s) but {show(s.get(k, _ABSENT))} "
                             f"on {gpus} ({runs[(variant, gpus)][0].path}): a variant is one configuration at every GPU count")
    if record is not None and all(r.config for rs in runs.values() for r in rs):
        common = flag_settings(list(record.get("common", [])))
        flags = {v: flag_settings(shlex.split(f)) if _splits(f) else {} for v, f in record["variants"]}
        for leg in (record.get("removal") or {}).get("legs", []):  # a removal leg's keys, as its runs record them
            flags[leg["name"]].update({k: repr(v) if isinstance(v, float) else str(v) for k, v in leg["log"].items()})
        declared = {k for f in flags.values() for k in f}
        for (variant, gpus), rs in runs.items():
            if variant not in flags:
                problems.add(f"{rs[0].path}: the variant {variant} is not in campaign.json's variants "
                             f"({', '.join(flags)}): a log of another campaign")
                continue
            want = dict(common, **flags[variant])
            for r in rs:
                bad = [k for k, v in want.items() if k not in PER_RUN and k not in allow and k in r.config and
                       not same_value(r.config[k], v)]
                if bad:
                    k = bad[0]
                    problems.add(f"{r.path}: its configuration has {k} {show(r.config[k])}, but campaign.json runs the variant "
                                 f"{variant} with --{k.replace('_', '-')} {want[k] if want[k] is not True else ''}".rstrip() +
                                 ": a log of another variant or campaign")
        for k in varying:
            if k not in declared and k not in DERIVED:
                vals = "; ".join(f"{group_name(g)}: {show(s.get(k, _ABSENT))}" for g, s in settings.items())
                problems.add(f"{k} differs between the variants ({vals}) but is none of the variants' flags in campaign.json: "
                             "logs of another campaign? (--allow-differ KEY accepts it)")
    return varying, settings


def _splits(text):
    try:
        shlex.split(text)
        return True
    except ValueError:
        return False


# ------------------------------------------------------------------------------------ the report
def fmt(x, digits=4):
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def spread(xs, value, digits):
    """A standard deviation or a confidence interval's half-width, or why there is none."""
    if not xs:
        return "n/a (no run)"
    if len(xs) < 2:
        return "n/a (1 run)"
    return fmt(value, digits)


def seeds_text(seeds):
    """1000-1004 for a run of consecutive seeds, else the list."""
    s = sorted(seeds)
    if not s:
        return "none recorded"
    if len(s) > 2 and s == list(range(s[0], s[0] + len(s))):
        return f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))


def runs_needed_text(n):
    if isinstance(n, float) and math.isinf(n):
        return f"more than {st.MAX_RUNS}"
    return "-" if isinstance(n, float) and math.isnan(n) else str(n)


def detectability(values, metrics, by_gpus, differences):
    """Rows of the section 'How much these runs can see', per metric and GPU count."""
    lines = ["", "How much these runs can see (two-sided test at the 5% level, 80% power, the noncentral t: "
             "statsmodels). Per group: its runs' standard deviation; the smallest true difference a comparison "
             "with the first variant can find with the runs at hand (pooled spread, the smaller count a side); "
             "what 15 runs a side would find at this spread; and the runs a side needed to find a difference of "
             + " or ".join(f"{d:g}%" for d in differences) + f" of the mean (the search stops at {st.MAX_RUNS}).", "",
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
                pct = lambda v: f"{v:.{d}f} ({100 * v / abs(m):.2f}%)" if m and math.isfinite(v) else fmt(v, d)  # noqa: E731
                need = [runs_needed_text(st.runs_needed(dd / 100 * abs(m), sd)) if sd > 0 and m else "-" for dd in differences]
                rel = f"{100 * sd / abs(m):.3f}%" if m else "n/a (mean 0)"
                lines.append(f"| {gpus} | {md(variant)} | {name} | {len(xs)} | {fmt(sd, d + 1)} | {rel} | {pct(now)} | "
                             f"{pct(at15)} | " + " | ".join(need) + " |")
    return lines


def val_steps_table(used, by_gpus):
    """Validation loss at every step that all used runs of a GPU count validated at: each
    variant's mean and standard deviation, and Welch's test of each variant against the first."""
    lines = ["", "Validation loss at each validation step (mean +- standard deviation over the runs; Welch's two-sided p "
             "of each variant against the first).", ""]
    for gpus, variants in by_gpus.items():
        curves = {v: [dict((s, x) for s, x, _ in r.val) for r in used[(v, gpus)]] for v in variants}
        every = [set(c) for cs in curves.values() for c in cs]
        if not every:
            continue
        steps = sorted(set.intersection(*every))
        base = variants[0]
        if lines[-1]:
            lines.append("")
        lines += ["| GPUs | step | " + " | ".join(md(v) for v in variants) + " | " +
                  " | ".join(f"{md(v)} - {md(base)} (p)" for v in variants[1:]) + " |",
                  "|" + " --- |" * (2 + 2 * len(variants) - 1)]
        for s in steps:
            vals = {v: [c[s] for c in curves[v]] for v in variants}
            cells = [(f"{fmt(st.mean(x))} +- {fmt(st.std(x))}" if len(x) > 1 else f"{fmt(x[0])} (1 run)") if x else "n/a (no run)"
                     for x in vals.values()]
            diffs = []
            for v in variants[1:]:
                x, y = vals[v], vals[base]
                p = st.welch(x, y)[2]
                diffs.append(f"{fmt(st.mean(x) - st.mean(y))} ({fmt(p, 3) if not math.isnan(p) else 'n/a: 1 run'})" if x and y
                             else "n/a (no run)")
            lines.append(f"| {gpus} | {s} | " + " | ".join(cells + diffs) + " |")
    return lines


def holdings(runs, varying, settings, allow, record):
    """What the report rests on: per group its seeds and run ids; the settings the variants differ
    in; the settings every run shares."""
    lines = ["", "What each group holds (seeds and run ids from the runs' own configurations; every log was checked: "
             "complete, its JSON lines the same run's, no run or seed twice, one configuration per group).", "",
             "| variant | GPUs | runs | seeds | run ids |", "| --- | --- | --- | --- | --- |"]
    for (variant, gpus), rs in runs.items():
        ids = ", ".join(r.run_id or "-" for r in rs) if any(r.run_id for r in rs) else "none recorded"
        lines.append(f"| {md(variant)} | {gpus} | {len(rs)} | {md(seeds_text([r.seed for r in rs if r.seed is not None]))} | "
                     f"{md(ids)} |")
    lines.append("")
    if varying:
        lines.append("The variants differ in: " + "; ".join(
            md(k) + " (" + ", ".join(f"{md(v)}: {md(show(settings[(v, g)].get(k, _ABSENT)))}"
                                     for v, g in _first_per_variant(settings)) + ")" for k in varying) + ".")
    else:
        lines.append("The variants differ in none of their recorded settings.")
    shared = [k for k in sorted({k for s in settings.values() for k in s}) if k not in varying]
    if all(r.config for rs in runs.values() for r in rs):
        s0 = next(iter(settings.values()))
        # (the data by its shards' names: the folder they sat in on the machine is not a setting)
        def shown(k):
            v = s0[k]
            return os.path.basename(v) if k in ("train_data", "val_data") and isinstance(v, str) else show(v)
        lines.append("Shared by every run: " + ", ".join(f"{md(k)} {md(shown(k))}" for k in shared) + ".")
    else:
        lines.append("Some logs record no configuration (no JSON lines beside them: modded-nanogpt's logs): of their "
                     "settings only the step count is known and checked; their runs have no seed and are not paired.")
    if allow:
        lines.append("Allowed to differ (--allow-differ): " + ", ".join(md(a) for a in allow) + ".")
    if record is not None:
        lines.append("The variants' flags were checked against the campaign's record (campaign.json).")
    return lines


def leak_status(rs):
    """Whether a group's mask lets a prediction see its own target, from its runs'
    configurations (one configuration a group: checked): (True, why), (False, why), or (None, why)
    where they do not say (logs without configuration, or from before train_gpt recorded it)."""
    said = [r.config.get(LEAK_KEY) for r in rs]
    if "yes" in said:
        return True, "leaks_targets yes in its configuration"
    if any(r.config.get("causal") == 0 and not isinstance(r.config.get("causal"), bool) for r in rs):
        return True, ("causal 0 in its configuration (logged before train_gpt recorded leaks_targets; its windows of 128 tokens "
                      "or more always let position t see position t + 1 with causal off)")
    if said and all(v == "no" for v in said):
        return False, "leaks_targets no in its configuration"
    return None, "not recorded in its logs"


def p_text(p):
    """A p-value as the records print it: 4 decimals, or 2 significant digits below 0.0001."""
    if not math.isfinite(p):
        return "n/a"
    return f"{p:.4f}" if p >= 1e-4 or p == 0 else f"{p:.2g}"


def record_check(runs, used, left, by_gpus, target, loss_only):
    """modded-nanogpt's record check of every group against the target loss (the docstring's
    --target-loss): the report's first line (the verdict per group) and its section."""
    alpha = st.RECORD_ALPHA
    verdicts, rows = [], []
    for gpus, variants in by_gpus.items():
        base = variants[0]
        for variant in variants:
            key = (variant, gpus)
            rs, done, bad = runs[key], used[key], left[key]
            xs = [r.final_val_loss for r in done]
            n_all, n = len(rs), len(xs)
            m = st.mean(xs) if xs else math.nan
            sd = st.std(xs) if n > 1 else math.nan
            leak, leak_why = leak_status(rs)
            p = st.p_below(xs, target)
            need = st.runs_to_pass(m, sd, target) if n > 1 and sd > 0 else math.nan
            over = f"over {n} runs" if n == n_all else f"over {n} of {n_all} runs"
            stats_text = f"mean {fmt(m)} {over}" if xs else f"no final loss in {n_all} run(s)"
            if leak:
                verdict = f"{stats_text}: refused: its mask leaks targets ({leak_why}); a loss that can copy its targets is no record"
            elif bad:
                verdict = (f"{stats_text}, {len(bad)} diverged or not finite ({', '.join(os.path.basename(b) for b, _ in bad)}): "
                           "fails (a record counts every run)")
            elif n < 2:
                verdict = f"{stats_text}: not judged: the one-sided t-test needs 2 runs or more"
            elif sd == 0:
                verdict = (f"{stats_text}, every run's loss {fmt(m)} (no spread): not judged: the t-test is undefined, and runs "
                           "of one loss are not independent samples")
            else:
                passes = p < alpha
                verdict = f"{stats_text}, p = {p_text(p)} {'<' if passes else '>='} {alpha:g}: {'passes' if passes else 'fails'}"
            if not leak and n > 1 and sd > 0:
                verdict += f"; the smallest n that passes at this mean and spread: {runs_needed_text(need) if m < target else 'none (the mean is not below ' + f'{target:g}' + ')'}"
            verdicts.append((key, verdict))
            row = [md(variant), str(gpus), str(n_all), md(", ".join(f"{os.path.basename(b)} ({why})" for b, why in bad) or "none"),
                   "yes" if leak else "no" if leak is False else "not recorded", fmt(m), spread(xs, sd, 5),
                   p_text(p) if n > 1 and sd > 0 else "n/a",
                   ("none (the mean is not below)" if m >= target else runs_needed_text(need)) if n > 1 and sd > 0 else "-"]
            if not loss_only:
                for get, d in ((lambda r: r.train_time_ms / 1e3, 2), (lambda r: r.step_avg_ms, 2)):
                    ys, bs = [get(r) for r in done], [get(r) for r in used[(base, gpus)]]
                    row.append(f"{fmt(st.mean(ys), d)} +- {spread(ys, st.ci95(ys) if ys else math.nan, d)}" if ys else "n/a (no run)")
                    if variant == base:
                        row.append("(baseline)")
                    else:
                        w = st.welch(ys, bs)[2]
                        row.append(p_text(w) if len(ys) > 1 and len(bs) > 1 else "n/a (fewer than 2 runs a side)")
            rows.append("| " + " | ".join(row) + " |")
    if len(verdicts) == 1:
        first = f"Record check against {target:g} (one-sided t-test, p < {alpha:g}): {verdicts[0][1]}"
    else:
        first = f"Record check against {target:g} (one-sided t-test, p < {alpha:g}): " + \
            "; ".join(f"{group_name(k)}: {v}" for k, v in verdicts)
    head = ["variant", "GPUs", "runs (all)", "diverged or not finite", "leaks targets", "mean final val loss", "std",
            f"p (mean < {target:g})", "smallest passing n"]
    if not loss_only:
        head += ["train time (s) mean +- 95% CI", "Welch p", "step avg (ms) mean +- 95% CI", "Welch p"]
    section = ["", f"Record check (modded-nanogpt's rule): the mean final validation loss must be below {target:g} with "
               f"p < {alpha:g} in the one-sided t-test scipy.stats.ttest_1samp(losses, {target:g}, alternative='less'), over "
               "every run made (a run that diverged fails its group). Smallest passing n: the smallest n for which n runs of "
               f"exactly this mean and standard deviation give p < {alpha:g}. Times: mean and half-width of the 95% confidence "
               "interval; Welch's two-sided p against the first variant at the same GPU count.", "",
               "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)] + rows
    return first, section


def removal_table(record, used, by_gpus, loss_only):
    """A removal campaign's table (campaign.json's "removal"): per GPU count and removal, the
    differences leg - full of the final validation loss and the step average over the seeds both
    ran (mean, 95% confidence interval, paired t-test's two-sided p) and the pairs a paired
    t-test would need to find that difference at the differences' spread (5% level, 80% power).
    Returns the lines and, for the plot, [(label, loss (mean, half), time (mean, half) or None)]."""
    legs = record["removal"]["legs"]
    full = legs[0]["name"]
    metrics = [("final val loss", lambda r: r.final_val_loss, 4), ("step avg (ms)", lambda r: r.step_avg_ms, 2)]
    if loss_only:
        metrics = metrics[:1]
    head = ["removed", "what it sets", "GPUs", "pairs (seeds)"]
    for name, _, _ in metrics:
        head += [f"delta {name} mean", "95% CI", "p (paired)", "pairs needed"]
    lines = ["", f"## Removals: each against the full recipe ({md(record['removal']['recipe'])})", "",
             "Per removal, the differences removal - full of the runs of one seed (a positive loss difference: the removed "
             "mechanism helps): their mean, its 95% confidence interval (Student t), the paired t-test's two-sided p, and "
             "the pairs of runs a paired t-test would need to find a difference of this size at the differences' spread "
             f"(5% level, 80% power; statsmodels; the search stops at {st.MAX_RUNS}). Diverged runs are left out of the pairs.", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    points = []
    for gpus, variants in by_gpus.items():
        if full not in variants:
            continue
        base = {r.seed: r for r in used[(full, gpus)] if r.seed is not None}
        for leg in legs[1:]:
            if leg["name"] not in variants:
                continue
            other = {r.seed: r for r in used[(leg["name"], gpus)] if r.seed is not None}
            both = sorted(set(base) & set(other))
            sets = "; ".join(f"{k} = {v!r} (was {leg['was'][k]!r})" for k, v in leg["set"].items())
            row = [md(leg["name"]), md(sets), str(gpus), f"{len(both)} ({seeds_text(both)})" if both else "0"]
            point = [f"{leg['name']} ({gpus} GPU{'s' if gpus > 1 else ''})"]
            for name, get, d in metrics:
                x, y = [get(other[s]) for s in both], [get(base[s]) for s in both]
                m, half = st.paired_ci(x, y)
                if len(both) < 2:
                    row += [fmt(m, d) if both else "n/a (no pair)", "n/a (fewer than 2 pairs)", "n/a", "-"]
                    point.append((m, math.nan))
                    continue
                _, sd, _, _, p = st.paired(x, y)
                need = st.runs_needed(abs(m), sd, paired=True) if sd > 0 and m != 0 else math.nan
                need_text = "n/a (no difference)" if m == 0 else runs_needed_text(need) if sd > 0 else "n/a (no spread)"
                row += [f"{m:+.{d}f}", f"[{m - half:+.{d}f}, {m + half:+.{d}f}]", p_text(p), need_text]
                point.append((m, half))
            lines.append("| " + " | ".join(row) + " |")
            points.append((point[0], point[1], point[2] if len(point) > 2 else None))
    if not points:
        lines.append("| " + " | ".join(["n/a (no run of the full recipe and a removal at one GPU count)"] + [""] * (len(head) - 1)) + " |")
    return lines, points


def removal_plot(points, out_dir, plt):
    """removals.png: each removal's difference from the full recipe with its 95% confidence
    interval, the loss's and (where timed) the step average's, one row a removal and GPU count."""
    timed = any(t is not None for _, _, t in points)
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(11 if timed else 6.5, 1.2 + 0.45 * len(points)), squeeze=False)
    ys = list(range(len(points)))[::-1]
    for ax, (i, label) in zip(axes[0], ((1, "final validation loss: removal - full"), (2, "step average (ms): removal - full"))):
        ms = [p[i][0] if p[i] is not None else math.nan for p in points]
        hs = [p[i][1] if p[i] is not None and math.isfinite(p[i][1]) else 0.0 for p in points]
        ax.errorbar(ms, ys, xerr=hs, fmt="o", capsize=4)
        ax.axvline(0.0, color="gray", linewidth=1)
        ax.set_yticks(ys, [p[0] for p in points] if i == 1 else [""] * len(points))
        ax.set_xlabel(label + " (mean, 95% CI)")
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "removals.png"), dpi=110)
    plt.close(fig)


def _first_per_variant(settings):
    seen, out = set(), []
    for v, g in settings:
        if v not in seen:
            seen.add(v)
            out.append((v, g))
    return out


def load(groups, record=None, allow=()):
    """Every group's logs parsed and checked (the refusals of the docstring): (runs, varying,
    settings) as check_runs gives them; ToolError, every log at fault named, when any is refused."""
    problems = Problems()
    runs = OrderedDict()
    for key, paths in groups.items():
        runs[key] = []
        for p in paths:
            try:
                runs[key].append(speedrun_logs.parse(p))
            except ToolError as e:  # speedrun_logs.LogError, or a file that cannot be read
                problems.add(str(e))
    problems.stop_if_any()
    varying, settings = check_runs(runs, record, set(allow), problems)
    problems.stop_if_any()
    return runs, varying, settings


def why_left_out(r, loss_only=False):
    """Why a run is left out of the statistics: it diverged (a loss logged as diverged), or its
    final loss or (unless loss_only) its times are not finite; None for a run that is used."""
    bad = [(n, v) for n, v in (("final val loss", r.final_val_loss), ("train time", r.train_time_ms),
                               ("step avg", r.step_avg_ms))[:1 if loss_only else 3] if not math.isfinite(v)]
    if r.diverged:  # the trainer stopped at a loss that is not finite
        return f"diverged (seed {r.seed}: {r.state()[1]})"
    if bad:
        return "not finite (" + ", ".join(f"{n} {'NaN' if math.isnan(v) else v}" for n, v in bad) + ")"
    return None


def identical(a, b):
    """Whether two runs' loss sequences are identical to the bit: "yes", "no", or "not known (...)"
    where both are equal as printed but a run has no losses in JSON lines (4 decimals alone)."""
    seq_a, seq_b = a.loss_sequence(), b.loss_sequence()
    same = seq_a == seq_b and bool(seq_a)  # the JSON lines' values as written, each to the bit
    if same and not (a.exact_losses and b.exact_losses):
        return "not known (equal as printed, to 4 decimals: no losses in JSON lines)"
    return "yes" if same else "no"


def build(groups, out_dir, title, differences=(0.2, 0.4), loss_only=False, record=None, allow=(), target=None):
    runs, varying, settings = load(groups, record, allow)

    metrics = [("final val loss", lambda r: r.final_val_loss, 4), ("train time (s)", lambda r: r.train_time_ms / 1e3, 2),
               ("step avg (ms)", lambda r: r.step_avg_ms, 2)]
    if loss_only:  # runs that shared a GPU, or otherwise not timed alone: their times say nothing
        metrics = metrics[:1]
    title = one_line(title)
    ran = OrderedDict((key, [r.seed for r in rs]) for key, rs in runs.items())
    partial, plan_lines = campaign_record.status(record, ran)
    if partial:
        print(f"ab_report: warning: {partial}", file=sys.stderr)
    lines = [f"# {title}" + (f" ({partial})" if partial else ""), "", "Per variant and GPU count, over the runs used (mean, standard deviation, half-width of the "
             "95% confidence interval of the mean). A log that is incomplete, another run's, a copy or of another "
             "configuration stops the report; a run that diverged (a loss logged as diverged, or a final value that is not "
             "finite) is counted, named and left out.", "",
             "| variant | GPUs | runs (used) | " + " | ".join(f"{m} mean | std | 95% CI" for m, _, _ in metrics) + " |",
             "|" + " --- |" * (3 + 3 * len(metrics))]
    values, used, left_out, left = {}, OrderedDict(), [], {}
    for (variant, gpus), rs in runs.items():
        done = []
        left[(variant, gpus)] = []
        for r in rs:
            why = why_left_out(r, loss_only)
            if why is None:
                done.append(r)
                continue
            left_out.append(f"| {md(variant)} | {gpus} | {md(r.path)} | {why} |")
            left[(variant, gpus)].append((r.path, why))
        used[(variant, gpus)] = done
        row = [md(variant), str(gpus), f"{len(rs)} ({len(done)})"]
        for name, get, d in metrics:
            xs = [get(r) for r in done]
            values[(variant, gpus, name)] = xs
            row += [fmt(st.mean(xs), d) if xs else "n/a (no run)", spread(xs, st.std(xs) if xs else math.nan, d),
                    spread(xs, st.ci95(xs) if xs else math.nan, d)]
        lines.append("| " + " | ".join(row) + " |")
    if not loss_only:
        n_json = sum(r.times_from_json for rs in runs.values() for r in rs)
        n_all = sum(len(rs) for rs in runs.values())
        lines += ["", f"Times: {n_json} of {n_all} runs from their JSON lines (to the microsecond), the rest from the text "
                      "log (whole milliseconds)."]
    if left_out:
        lines += ["", f"**{len(left_out)} run(s) left out of the statistics:**", "", "| variant | GPUs | log | why |",
                  "| --- | --- | --- | --- |"] + left_out
        for row in left_out:
            print("ab_report: warning: left out " + " ".join(c.strip() for c in row.strip("|").split(" | ")), file=sys.stderr)
    removal_points = None
    if record is not None and record.get("removal"):
        by_gpus0 = OrderedDict()
        for variant, gpus in runs:
            by_gpus0.setdefault(gpus, []).append(variant)
        section, removal_points = removal_table(record, used, by_gpus0, loss_only)
        lines[1:1] = section
    leaky = [(key, why) for key, rs in runs.items() for leak, why in [leak_status(rs)] if leak]
    if leaky:
        text = ("**Leaks targets:** " + "; ".join(f"{md(group_name(k))} ({md(why)})" for k, why in leaky) +
                ": its attention lets position t see the token at t + 1 that it is scored on predicting, so its loss measures "
                "copying, not language modelling; no record check accepts it.")
        lines[1:1] = ["", text]
        for k, why in leaky:
            print(f"ab_report: warning: {group_name(k)} leaks targets ({why})", file=sys.stderr)
    by_gpus = OrderedDict()
    for variant, gpus in runs:
        by_gpus.setdefault(gpus, []).append(variant)
    if target is not None:
        first, section = record_check(runs, used, left, by_gpus, target, loss_only)
        lines[0:0] = [first + (f" ({partial})" if partial else ""), ""]
        lines += section
    lines += plan_lines
    lines += holdings(runs, varying, settings, allow, record)
    lines += ["", "Welch's t-test of each variant against the first variant at the same GPU count (two-sided p).", "",
              "| GPUs | variant | vs | metric | difference of means | t | p |", "| --- | --- | --- | --- | --- | --- | --- |"]
    identical_rows, paired_rows = [], []
    for gpus, variants in by_gpus.items():
        base = variants[0]
        for other in variants[1:]:
            for name, _, d in metrics:
                x, y = values[(other, gpus, name)], values[(base, gpus, name)]
                t, df, p = st.welch(x, y)
                diff = st.mean(x) - st.mean(y) if x and y else math.nan
                p_text = fmt(p, 4) if len(x) > 1 and len(y) > 1 else "n/a (fewer than 2 runs a side)"
                lines.append(f"| {gpus} | {md(other)} | {md(base)} | {name} | {fmt(diff, d)} | {fmt(t, 2)} | {p_text} |")
            a = {r.seed: r for r in used[(base, gpus)] if r.seed is not None}
            b = {r.seed: r for r in used[(other, gpus)] if r.seed is not None}
            both = sorted(set(a) & set(b))
            if len(both) >= 2:
                m, sd, t, df, p = st.paired([b[s].final_val_loss for s in both], [a[s].final_val_loss for s in both])
                paired_rows.append(f"| {gpus} | {md(other)} | {md(base)} | {len(both)} ({seeds_text(both)}) | {fmt(m)} | "
                                   f"{fmt(sd)} | {fmt(t, 2)} | {fmt(p, 4)} |")
            elif not a or not b:
                paired_rows.append(f"| {gpus} | {md(other)} | {md(base)} | 0 (no seeds recorded) | n/a | n/a | n/a | n/a |")
            else:
                paired_rows.append(f"| {gpus} | {md(other)} | {md(base)} | {len(both)} | n/a (fewer than 2 pairs) | n/a | n/a | "
                                   "n/a |")
            for s in both:
                verdict = identical(a[s], b[s])
                identical_rows.append(f"| {gpus} | {md(base)} vs {md(other)} | {s} | {md(a[s].run_id or '-')}, "
                                      f"{md(b[s].run_id or '-')} | {verdict} |")
    lines += ["", "Final validation loss paired by seed (from the runs' configurations; a fair pairing only where one "
              "seed gives both variants the same start, as in one trainer with a flag flipped): mean and standard deviation "
              "of the differences, paired t-test (two-sided p).", "",
              "| GPUs | variant | vs | pairs (seeds) | mean difference | std of differences | t | p |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"] + paired_rows
    lines += val_steps_table(used, by_gpus)
    lines += detectability(values, metrics, by_gpus, differences)
    lines += ["", "Loss sequences, paired by seed: identical to the bit?", "",
              "| GPUs | variants | seed | run ids | identical |", "| --- | --- | --- | --- | --- |"] + \
        (identical_rows or ["| - | - | - | - | no pairs (no seed in both variants) |"])
    return write_out(lines, used, by_gpus, values, out_dir, not loss_only, removal_points)


def write_out(lines, used, by_gpus, values, out_dir, times, removal_points=None):
    """Writes the report and its plots into a temporary folder inside out_dir and moves them into
    place only when all are written; report files of an earlier report that this one does not
    make are removed, so that the folder never mixes two reports."""
    made = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".ab_report-", dir=out_dir)
    try:
        plots, note = make_plots(used, by_gpus, values, tmp, times, removal_points)
        if note:
            lines += ["", note]
        if plots:
            lines += [""] + [f"![{name}]({name})" for name in plots]
        text = "\n".join(lines) + "\n"
        with open(os.path.join(tmp, "report.md"), "w", encoding="utf-8") as f:
            f.write(text)
        for name in plots + ["report.md"]:
            os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
        for name in OUTPUTS:
            if name not in plots and name != "report.md" and os.path.isfile(os.path.join(out_dir, name)):
                os.remove(os.path.join(out_dir, name))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if made and not os.listdir(out_dir):  # a folder this run made, left empty: not left behind
            os.rmdir(out_dir)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return text


def make_plots(used, by_gpus, values, out_dir, times=True, removal_points=None):
    """The plots (file names) and a note for the report when there are none."""
    plots, note = _make_plots(used, by_gpus, values, out_dir, times)
    if removal_points and not note:
        import matplotlib.pyplot as plt
        removal_plot(removal_points, out_dir, plt)
        plots = ["removals.png"] + plots
    return plots, note


def _make_plots(used, by_gpus, values, out_dir, times=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError as e:
        msg = (f"no plots: matplotlib is missing from {sys.executable} ({e}); apt-get install python3-matplotlib "
               "(scripts/setup.sh does), or run with /usr/bin/python3")
        print(f"ab_report: warning: {msg}", file=sys.stderr)
        return [], msg[0].upper() + msg[1:] + "."
    fig, ax = plt.subplots(figsize=(8, 5))
    for (variant, gpus), rs in used.items():
        curves = [dict((s, v) for s, v, _ in r.val) for r in rs if r.val and all(math.isfinite(v) for _, v, _ in r.val)]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        ys = np.array([[c[s] for s in steps] for c in curves])
        m, sd = ys.mean(0), ys.std(0, ddof=1) if len(curves) > 1 else np.zeros(len(steps))
        line, = ax.plot(steps, m, label=f"{variant}, {gpus} GPU ({len(curves)} runs)")
        ax.fill_between(steps, m - sd, m + sd, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (mean, +-1 std band)")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "val_loss.png"), dpi=110)
    plt.close(fig)
    if not times:
        return ["val_loss.png"], ""
    # one panel per GPU count, each on its own scale: per variant the single step times of all
    # its runs (box) and each run's step average (dots); the title gives each variant's
    # difference from the first in mean step average with its 95% confidence interval (Welch)
    panels = [(g, vs) for g, vs in by_gpus.items() if any(r.step_times_ms() for v in vs for r in used[(v, g)])]
    if not panels:
        return ["val_loss.png"], ""
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.0, 4.2 * len(panels)), 5.2), squeeze=False)
    for ax, (gpus, variants) in zip(axes[0], panels):
        data, labels, avgs = [], [], []
        for v in variants:
            data.append([t for r in used[(v, gpus)] for t in r.step_times_ms() if math.isfinite(t)] or [math.nan])
            avgs.append(values[(v, gpus, "step avg (ms)")])
            labels.append(f"{v}\n({len(used[(v, gpus)])} runs)")
        ax.boxplot(data, showfliers=False)
        for i, a in enumerate(avgs, 1):
            ax.plot([i] * len(a), a, "o", color="black", markersize=4, alpha=0.7, label="a run's step average" if i == 1 else None)
        ax.set_xticks(range(1, len(labels) + 1), labels)
        heads = []
        base = avgs[0]
        for v, a in zip(variants[1:], avgs[1:]):
            d, half = st.welch_ci(a, base)
            if math.isfinite(d) and math.isfinite(half) and st.mean(base):
                heads.append(f"{v} - {variants[0]}: {d:+.2f} ms ({100 * d / st.mean(base):+.2f}%), 95% CI +-{half:.2f}")
            else:
                heads.append(f"{v} - {variants[0]}: n/a (fewer than 2 runs a side)")
        ax.set_title(f"{gpus} GPU(s)" + ("\n" + "\n".join(heads) if heads else ""), fontsize=9)
        ax.set_ylabel("step time (ms), steps after the 10th")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "step_times.png"), dpi=110)
    plt.close(fig)
    return ["val_loss.png", "step_times.png"], ""


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ab_report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs-dir", help="directory of VARIANT_gN_rI.txt logs")
    ap.add_argument("--group", action="append", default=[], help="NAME@GPUS=GLOB (repeatable)")
    ap.add_argument("--out", required=True, help="output directory for report.md and the plots")
    ap.add_argument("--title", default="Ablation report")
    ap.add_argument("--difference", type=float, action="append",
                    help="a difference, in %% of the mean, to say how many runs would find (repeatable; default 0.2 and 0.4)")
    ap.add_argument("--loss-only", action="store_true",
                    help="compare losses only: for runs that were not timed alone (several sharing a GPU)")
    ap.add_argument("--allow-differ", action="append", default=[], metavar="KEY",
                    help="a configuration entry (git_commit, gpu, ...) whose values may differ between runs of a group "
                         "(repeatable; named in the report)")
    ap.add_argument("--target-loss", type=float, nargs="?", const=DEFAULT_TARGET, metavar="L",
                    help=f"add modded-nanogpt's record check against the mean final validation loss L ({DEFAULT_TARGET} when "
                         "given without a value): one-sided t-test, p < 0.01; the verdict is the report's first line")
    a = ap.parse_args(argv)
    if a.target_loss is not None and not (math.isfinite(a.target_loss) and a.target_loss > 0):
        ap.error(f"--target-loss wants a finite loss above 0 (a mean cross-entropy in nats; the record's is {DEFAULT_TARGET}), "
                 f"got {a.target_loss}")
    if bool(a.logs_dir) == bool(a.group):
        ap.error("give exactly one of --logs-dir or --group")
    diffs = a.difference or [0.2, 0.4]
    if any(not (math.isfinite(d) and 0 < d < 100) for d in diffs):
        ap.error(f"--difference wants percentages between 0 and 100, got {diffs}")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        raise ToolError(f"--out {a.out}: exists and is not a folder")
    record = None
    if a.logs_dir:
        groups, record = discover(a.logs_dir)
    else:
        groups = from_patterns(a.group)
    if not groups:
        raise ToolError(f"--logs-dir {a.logs_dir}: no logs named VARIANT_gN_rI.txt there")
    print(build(groups, a.out, a.title, diffs, a.loss_only, record, a.allow_differ, a.target_loss))
    return 0


if __name__ == "__main__":
    run_tool(main, "ab_report")
