"""campaign.json, the record scripts/ab_run.py keeps of a campaign: read and checked for
scripts/ab_report.py (every field through tool_errors' checked reader, refusals naming the file
and field), and the plan it records set against the runs found: what was planned, what ran and
what is missing.

The plan is the variants x GPU counts x seeds of the campaign ("plan", written by ab_run since it
records one). A record of an earlier ab_run has no "plan" but its last command's "gpus", "runs"
and "seed0", from which the plan is taken (said so in the report); a record with neither says
nothing of a plan, and the report says that what is missing cannot be told.
A removal campaign's record ("removal") is checked too: its legs are the variants.
The bounds below are ab_run's too: a count past them is refused before any command is built.
"""
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, checked, field, read_json, record  # noqa: E402

MAX_RUNS = 1000         # --runs
MAX_GPUS = 65536        # a GPU count of --gpus
MAX_GPU_COUNTS = 64     # GPU counts in --gpus
MAX_VARIANTS = 100      # --variant
MAX_PLANNED = 100000    # runs in all: GPU counts x runs x variants
MAX_SEED = 2 ** 64 - 1  # train_gpt's --seed is a 64-bit unsigned integer
MAX_SEEDS = 100000      # seeds in a plan (runs extended over several commands)
MAX_VALUE = 2 ** 63     # a recipe value in a removal record (integers are 64-bit, numbers far smaller)


def _list(obj, name, where, limit):
    v = field(obj, name, where, list)
    if len(v) > limit:
        raise ToolError(f"{where}: {name} holds {len(v)} entries: at most {limit}")
    return v


def read(path):
    """The record, checked, with "plan" set to {"variants", "gpus", "seeds"} (None when the
    record tells no plan) and "plan_from" to "plan", "gpus, runs and seed0" or None."""
    rec = record(read_json(path, "campaign record"), path, "a campaign record of scripts/ab_run.py (a JSON object)")
    variants = _list(rec, "variants", path, MAX_VARIANTS)
    for i, v in enumerate(variants):
        if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)):
            raise ToolError(f"{path}: variants[{i}] is not a [NAME, FLAGS] pair of text: not a campaign record of "
                            "scripts/ab_run.py")
    for i, c in enumerate(_list(rec, "common", path, 100000) if "common" in rec else []):
        checked(c, path, f"common[{i}]", str)
    # the numbers of the last command, checked wherever they are recorded
    gpus = [checked(g, path, f"gpus[{i}]", int, 1, MAX_GPUS) for i, g in enumerate(_list(rec, "gpus", path, MAX_GPU_COUNTS))] \
        if "gpus" in rec else None
    runs = field(rec, "runs", path, int, 1, MAX_RUNS, default=None)
    seed0 = field(rec, "seed0", path, int, 0, MAX_SEED, default=None)
    names = [v[0] for v in variants]
    twice = sorted(n for n, k in Counter(names).items() if k > 1)
    if twice:  # ab_run refuses a variant name given twice: this is an edit, and its runs would be counted as whose?
        raise ToolError(f"{path}: variants names {', '.join(twice[:5])} twice: not a campaign record of scripts/ab_run.py")
    plan, source = None, None
    if "plan" in rec:
        where = f"{path}: plan"
        p = record(rec["plan"], where)
        pv = [checked(v, where, f"variants[{i}]", str) for i, v in enumerate(_list(p, "variants", where, MAX_VARIANTS))]
        pg = [checked(g, where, f"gpus[{i}]", int, 1, MAX_GPUS) for i, g in enumerate(_list(p, "gpus", where, MAX_GPU_COUNTS))]
        ps = [checked(s, where, f"seeds[{i}]", int, 0, MAX_SEED) for i, s in enumerate(_list(p, "seeds", where, MAX_SEEDS))]
        for name, items in (("variants", pv), ("gpus", pg), ("seeds", ps)):  # ab_run writes each once: a repeat is an edit
            twice = sorted((x for x, n in Counter(items).items() if n > 1), key=str)
            if twice:
                raise ToolError(f"{where}: {name} lists {', '.join(map(str, twice[:5]))}{' ...' if len(twice) > 5 else ''} more than "
                                f"once: each planned run is one variant, GPU count and seed; not a plan of scripts/ab_run.py")
        unknown = [v for v in pv if v not in names]
        if unknown:
            raise ToolError(f"{where}: variants names {', '.join(unknown[:5])}, which the record's variants do not hold: "
                            "not a plan of scripts/ab_run.py")
        if len(pv) * len(pg) * len(ps) > MAX_PLANNED * 10:
            raise ToolError(f"{where}: {len(pv) * len(pg) * len(ps)} planned runs: not a plan of scripts/ab_run.py")
        plan, source = {"variants": pv, "gpus": sorted(pg), "seeds": sorted(ps)}, "plan"
    elif gpus is not None and runs is not None and seed0 is not None:
        if seed0 + runs - 1 > MAX_SEED:
            raise ToolError(f"{path}: seed0 {seed0} + runs {runs} - 1 is past the 64-bit seeds")
        plan, source = {"variants": names, "gpus": sorted(set(gpus)), "seeds": list(range(seed0, seed0 + runs))}, \
            "gpus, runs and seed0"
    if "removal" in rec:
        rec = dict(rec, removal=_removal(rec["removal"], f"{path}: removal", names))
    return dict(rec, plan=plan, plan_from=source)


def _removal(v, where, names):
    """A removal campaign's record (scripts/ab_run.py --remove): the recipe, its SHA-256 and
    its legs, one a variant in the variants' order, each {"name", "set", "was", "log", "off"}:
    the recipe keys set, their values in the recipe, the same by the log's names, and what each
    turns off."""
    rm = record(v, where)
    field(rm, "recipe", where, str)
    field(rm, "recipe_sha256", where, str)
    legs = []
    for i, leg in enumerate(_list(rm, "legs", where, MAX_VARIANTS)):
        at = f"{where}: legs[{i}]"
        record(leg, at)
        out = {"name": field(leg, "name", at, str)}
        for part in ("set", "was", "log"):
            d = record(field(leg, part, at, dict), f"{at}: {part}")
            out[part] = {k: v if isinstance(v, str) else checked(v, f"{at}: {part}", k, float if isinstance(v, float) else int,
                                                                  -MAX_VALUE, MAX_VALUE) for k, v in d.items()}
        out["off"] = [checked(t, at, f"off[{j}]", str) for j, t in enumerate(_list(leg, "off", at, 1000))]
        if set(out["set"]) != set(out["was"]) or len(out["log"]) != len(out["set"]):
            raise ToolError(f"{at}: set, was and log name other keys: not a removal record of scripts/ab_run.py")
        legs.append(out)
    if [leg["name"] for leg in legs] != names:
        raise ToolError(f"{where}: the legs ({', '.join(leg['name'] for leg in legs)}) are not the variants "
                        f"({', '.join(names)}): not a removal record of scripts/ab_run.py")
    return dict(rm, legs=legs)


def status(rec, ran):
    """(note for the report's first line or "", lines of its plan section) for the record and
    the runs found: ran is {(variant, gpus): [seed or None, ...]}."""
    if rec is None:
        return "", []
    plan = rec.get("plan")
    if plan is None:
        return "", ["", "The campaign's record (an earlier scripts/ab_run.py's) holds no plan: what is missing cannot be told."]
    planned = {(v, g, s) for v in plan["variants"] for g in plan["gpus"] for s in plan["seeds"]}
    found = {(v, g, s) for (v, g), seeds in ran.items() for s in seeds if s is not None}
    unseeded = sum(s is None for seeds in ran.values() for s in seeds)
    missing = sorted(planned - found, key=lambda k: (k[1], plan["variants"].index(k[0]), k[2]))
    extra = sorted(found - planned, key=lambda k: (k[1], k[0], k[2]))
    got = len(planned & found)
    source = "campaign.json" if rec.get("plan_from") == "plan" else \
        f"campaign.json's {rec['plan_from']}: a record of an earlier ab_run"
    lines = ["", f"Plan ({source}): {len(plan['variants'])} variant(s) x {len(plan['gpus'])} GPU count(s) "
             f"({', '.join(map(str, plan['gpus']))}) x {len(plan['seeds'])} seed(s) = {len(planned)} runs; "
             f"ran {got}; missing {len(missing)}."]
    if missing:
        shown = [f"{v}@{g} seed {s}" for v, g, s in missing[:20]]
        lines.append("Missing: " + ", ".join(shown) + (f", and {len(missing) - 20} more" if len(missing) > 20 else "") + ".")
    if extra:
        lines.append(f"Beyond the plan: {len(extra)} run(s) (" + ", ".join(f"{v}@{g} seed {s}" for v, g, s in extra[:10]) +
                     (", ..." if len(extra) > 10 else "") + ").")
    if unseeded:
        lines.append(f"{unseeded} run(s) record no seed: they cannot be matched to the plan.")
    note = f"partial: {len(missing)} of {len(planned)} planned runs missing" if missing else ""
    return note, lines
