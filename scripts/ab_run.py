#!/usr/bin/env python3
"""Runs an ablation campaign: for each GPU count and each variant, N runs with distinct seeds
(run i uses seed SEED0 + i for every variant, so runs pair up across variants), launched through
mpirun when more than one GPU is asked for; the variants take turns (run 0 of each, then run 1
of each, ...), so a slow drift of the machine's speed does not fall on one variant. Logs are
named CAMPAIGN/VARIANT_gN_rI.txt; a run whose log already reaches its final validation is
skipped, so an interrupted campaign resumes where it stopped (a partial log is moved into
CAMPAIGN/incomplete/ and its run started again). A run whose log ends at a loss logged as
diverged (train_gpt's diverged(nan|inf|-inf), where it stops with exit 1; read by
scripts/speedrun_logs.py) is a finished run too: the campaign goes on, never runs it again, and
ends by naming every diverged run with its variant, GPU count, seed and the loss and step
(scripts/ab_report.py counts such runs and leaves them out of its statistics).

CAMPAIGN/campaign.json records what defines the runs: the variants and their flags, the common
flags, the first seed, the trainer, the mpirun arguments, and the data (each shard's name and
size, and the SHA-256 of the folder's manifest, for the --train-data and --val-data patterns of
the flags). Resuming with any of these changed is refused (the old logs would be reported under
the new flags) unless --start-over is given, which moves the old logs into CAMPAIGN/old-DATE-TIME/
first; nothing is deleted. More runs or other GPU counts only extend a campaign and are allowed.
A variant whose runs would train on their validation data is refused before anything is
written: the same --train-data and --val-data pattern (exit 2), or a shard of the same SHA-256
under both (exit 1, naming both files), unless its flags hold --allow-train-on-val; a pattern
its flags do not give is train_gpt's default: its recipe's (--recipe FILE, or --preset NAME's).
Every shard's header is checked as train_gpt checks it (scripts/shard_format.py), and a shard that
fails is refused (exit 1, naming the file and the fault): so a validation shard copied in with a
header word changed, whose file's SHA-256 is another, is refused, not trained on as other data.
It records the plan too ("plan": the variants, GPU counts and seeds, this command's and those of
the record it extends), so that scripts/ab_report.py can say what was planned, what ran and what
is missing. Every count has a bound, checked before any command is built (exit 2 naming the flag):
--runs at most 1000, --gpus at most 64 counts of at most 65536, --variant at most 100 times, at
most 100000 runs in all, and the last seed within train_gpt's 64-bit --seed.

A run is what its own log records, so a resume checks the logs too: a complete log is skipped
only when its configuration (the JSON lines beside it) is the run planned there (its seed, its
GPU count, the flags given); and every run of the campaign, old and new, must share every other
setting its configuration records (the data, the validation tokens, the trainer's commit, the
GPU, ...) but the variants' flags: a log copied in from elsewhere, or a trainer rebuilt or a
default changed halfway, is refused with the log and the setting named. --allow-differ KEY
accepts differing values of one setting.

    python3 scripts/ab_run.py --campaign logs/mask --gpus 1,2 --runs 5 \\
        --variant uni='--window-mask uni' --variant bi='--window-mask bi' -- --preset default --steps 200

Each run is: [mpirun -np N] TRAINER COMMON... VARIANT_FLAGS... --seed S --log-file LOG

A removal campaign runs a recipe whole and with one mechanism at a time turned off, in place of
--variant (scripts/removals.py says what it takes and refuses):

    python3 scripts/ab_run.py --campaign logs/removals --runs 5 --recipe recipes/default.toml \\
        --remove attention.doc_mask,schedule.window_start,schedule.lr_cooldown=300 [--removals FILE] -- COMMON_FLAGS

--remove KEY sets a recipe key to its neutral value (the trainer's --print-schema), KEY=VALUE to
VALUE; --removals FILE lists removals of one or more keys. Its variants are "full" (the recipe)
and one leg a removal (no-KEY, or the name the file gives), each run from a recipe file written
into CAMPAIGN/recipes/ (the recipe with the leg's keys changed); like any campaign, they take
turns run by run with the same seeds. campaign.json records the removals ("removal": the recipe,
its SHA-256 and each leg's keys, values and log names), and scripts/ab_report.py tables each
removal's deltas against the full recipe.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import campaign_record  # noqa: E402
import removals  # noqa: E402
import shard_format  # noqa: E402
import speedrun_logs  # noqa: E402
from campaign_record import MAX_GPU_COUNTS, MAX_GPUS, MAX_PLANNED, MAX_RUNS, MAX_SEED, MAX_VARIANTS  # noqa: E402
from tool_errors import ToolError, read_toml, run as run_tool  # noqa: E402

# what defines a campaign's runs: a change in any of these makes its old logs another experiment
DEFINING = ("variants", "common", "seed0", "trainer", "mpirun_args")
OPTIONAL = ("data", "removal")  # recorded since; a record without it is of an earlier runner and not compared
DATA_FLAGS = ("--train-data", "--val-data")
# train_gpt's data patterns where its flags name none are its recipe's (docs/recipes.md): the
# --recipe file's [data], else the shipped recipe --preset names (recipes/NAME.toml, speedrun:
# 2024-12-10), else recipes/default.toml
RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes")


def recipe_data(path):
    """The (train, val) patterns of a recipe file's [data] table, or (None, None) where the file
    cannot be read as a recipe (train_gpt refuses it, naming why); ToolError for a FIFO, device
    or socket, whose read would wait for a writer."""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise ToolError(f"--recipe {path}: not a regular file (a FIFO, device or socket), not a recipe file")
    try:
        data = read_toml(path, "recipe file").get("data")
    except (ToolError, OSError):
        return None, None
    patterns = tuple(data.get(k) if isinstance(data, dict) else None for k in ("train", "val"))
    return patterns if all(isinstance(p, str) for p in patterns) else (None, None)


def shard_sha256(path):
    """The SHA-256 of a shard's whole file, read in pieces of 4 MiB, its header checked on the way
    as train_gpt checks it (scripts/shard_format.py: ShardError naming the file and the word). A run
    of a shard that fails it would be refused when it starts; and with every header good the header
    follows from the tokens, so equal digests are equal tokens: a copy of a validation shard with a
    header word changed is refused here, not taken for other data by the digests compared below."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        piece = f.read(4 << 20)
        shard_format.check_header(path, piece[:shard_format.HEADER_BYTES], os.fstat(f.fileno()).st_size)
        while piece:
            h.update(piece)
            piece = f.read(4 << 20)
    return h.hexdigest()


def data_fingerprint(flags):
    """{pattern: [[shard name, size, sha256], ..., ["manifest.tsv sha256", digest]]} for each data
    pattern among the flags: what the runs read, known by content (a shard changed in place at the
    same size is other data). Every shard is read once: about 0.6 GB/s on 2 CPU cores."""
    out = {}
    for i, t in enumerate(flags):
        name, eq, value = t.partition("=")
        if name in DATA_FLAGS and (eq or i + 1 < len(flags)):
            pattern = value if eq else flags[i + 1]
            files = sorted(glob.glob(pattern))
            try:
                entry = [[os.path.basename(f), os.path.getsize(f), shard_sha256(f)] for f in files if os.path.isfile(f)]
            except OSError as e:
                raise ToolError(f"{name} {pattern}: cannot read {e.filename}: {e.strerror}")
            for folder in sorted({os.path.dirname(f) for f in files}):
                manifest = os.path.join(folder, "manifest.tsv")
                if os.path.isfile(manifest):
                    with open(manifest, "rb") as m:
                        entry.append([os.path.join(os.path.basename(folder), "manifest.tsv sha256"),
                                      hashlib.sha256(m.read()).hexdigest()])
            out[pattern] = entry
    return out


def write_whole(path, text):
    """Writes text to path through path.tmp, renamed into place once written whole. Whatever is
    at path.tmp is this tool's leftover of an interrupted write: removed first, and the new one
    made afresh (O_EXCL), so that a FIFO or a link there is never opened (a FIFO would wait for a
    reader for ever)."""
    tmp = path + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    with open(tmp, "x", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def last_value(flags, name):
    """The value of the last `name VALUE` or `name=VALUE` among flags (the one the trainer keeps), or None."""
    found = None
    for i, t in enumerate(flags):
        key, eq, value = t.partition("=")
        if key == name and (eq or i + 1 < len(flags)):
            found = value if eq else flags[i + 1]
    return found


def data_patterns(flags):
    """The --train-data and --val-data patterns a run of these flags reads: the last given, else
    train_gpt's default, its recipe's (None for a recipe train_gpt cannot read: it refuses it)."""
    recipe, preset = last_value(flags, "--recipe"), last_value(flags, "--preset") or "default"
    preset = "2024-12-10" if preset == "speedrun" else preset
    if recipe is not None:
        default = recipe_data(recipe)
    else:
        default = recipe_data(os.path.join(RECIPES, preset + ".toml")) if re.fullmatch(r"[A-Za-z0-9_-]+", preset) else (None, None)
    train, val = last_value(flags, "--train-data"), last_value(flags, "--val-data")
    return (default[0] if train is None else train), (default[1] if val is None else val)


def train_on_val(common, variants, data):
    """Why a variant's runs would train on their validation data, or None: the shards of its
    --train-data and --val-data (its own pattern, else the common flags', else train_gpt's
    default: data_patterns) that share a SHA-256 (a
    copy, the same file under two names, or one file both patterns match). train_gpt refuses such
    a run too, but only when it starts; here the campaign is refused before anything is written.
    --allow-train-on-val among a variant's flags lets it through, as it does train_gpt."""
    for name, flags in variants:
        own = common + split(flags, f"--variant {name}")
        train, val = data_patterns(own)
        if train is None or val is None or "--allow-train-on-val" in own:
            continue
        for pattern in (train, val):  # a default pattern is not among the flags' data: read it here
            if pattern not in data:
                data = dict(data, **data_fingerprint(["--train-data", pattern]))
        by_digest = {e[2]: e[0] for e in data.get(val, []) if len(e) == 3}
        for shard, _, sha in (e for e in data.get(train, []) if len(e) == 3):
            if sha in by_digest:
                return (f"variant {name}: --train-data shard {shard} ({train}) holds the same bytes as --val-data shard "
                        f"{by_digest[sha]} ({val}), SHA-256 {sha}: its runs would validate on data they train on; name other "
                        "shards, or give --allow-train-on-val to do so on purpose")
    return None


def split(text, flag):
    try:
        return shlex.split(text)
    except ValueError as e:
        raise ToolError(f"{flag} {text!r}: {e}")


def campaign_logs(campaign):
    return sorted(glob.glob(os.path.join(glob.escape(campaign), "*_g*_r*.txt")) +
                  glob.glob(os.path.join(glob.escape(campaign), "*_g*_r*.jsonl")))


def check_record(campaign, manifest, start_over):
    """Refuses to resume a campaign whose defining flags changed; with start_over, moves its logs
    aside. Returns the earlier record kept (None without one, or with start_over)."""
    path = os.path.join(campaign, "campaign.json")
    if not os.path.exists(path):
        if campaign_logs(campaign) and not start_over:
            raise ToolError(f"{campaign} holds run logs but no campaign.json: they may be of other flags; "
                            "name a new --campaign, or give --start-over to move them aside")
        old = None
    else:
        try:
            old = campaign_record.read(path)  # every field checked: type, range
            if any(k not in old for k in DEFINING):
                raise ToolError(f"{path}: want a JSON object with " + ", ".join(DEFINING))
        except ToolError as e:
            if not start_over:
                raise ToolError(f"not a campaign record: {e}; name a new --campaign, or give --start-over")
            old = None  # moved aside below with the logs
    changed = [k for k in DEFINING + OPTIONAL if old is not None and (k in DEFINING or k in old) and
               json.loads(json.dumps(old.get(k))) != json.loads(json.dumps(manifest[k]))]
    if old is not None and changed and not start_over:
        detail = "; ".join(_data_change(old.get(k), manifest[k]) if k == "data" else f"{k}: was {_short(old.get(k))}, now {_short(manifest[k])}"
                           for k in changed)
        raise ToolError(f"{campaign} was run with other flags ({path}: {detail}); its logs would be reported under the new ones. "
                        "Run it with the old flags, name a new --campaign, or give --start-over to move the old logs aside")
    if start_over:
        old = None  # its runs are moved aside: none of its plan stays
    if start_over and (os.path.exists(path) or campaign_logs(campaign)):
        aside = os.path.join(campaign, time.strftime("old-%Y%m%d-%H%M%S"))
        for k in range(2, 1000):  # a second --start-over within the second gets a folder of its own
            try:
                os.makedirs(aside)
                break
            except FileExistsError:
                aside = os.path.join(campaign, time.strftime("old-%Y%m%d-%H%M%S") + f"-{k}")
        moved = campaign_logs(campaign) + ([path] if os.path.exists(path) else []) + \
            ([os.path.join(campaign, "recipes")] if os.path.isdir(os.path.join(campaign, "recipes")) else [])  # a removal campaign's legs
        for f in moved:
            os.replace(f, os.path.join(aside, os.path.basename(f)))
        print(f"ab_run: --start-over: moved {len(moved)} file(s) into {aside}", flush=True)
    return old


def planned(old, names, gpus, seeds):
    """The campaign's plan: its variants, GPU counts and seeds, this command's and (on a resume
    that extends it) the earlier record's, so that no planned run drops out of the record."""
    plan = {"variants": list(names), "gpus": sorted(set(gpus)), "seeds": list(seeds)}
    before = old.get("plan") if old else None  # checked by campaign_record.read
    if before:
        plan["gpus"] = sorted(set(plan["gpus"]) | set(before["gpus"]))
        plan["seeds"] = sorted(set(plan["seeds"]) | set(before["seeds"]))
    return plan


def _data_change(was, now):
    """The shards whose name, size or SHA-256 differ between two data records, named."""
    def entries(rec):
        return {(p, e[0]): e[1:] for p, es in (rec or {}).items() if isinstance(es, list) for e in es if isinstance(e, list) and e}
    a, b = entries(was), entries(now)
    names = sorted({k[1] for k in a.keys() | b.keys() if a.get(k) != b.get(k)}, key=str)
    return "data: " + (", ".join(map(str, names[:10])) + (f" and {len(names) - 10} more" if len(names) > 10 else "") +
                       " differ (name, size or SHA-256)" if names else f"was {_short(was)}, now {_short(now)}")


def _short(v, limit=300):
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "...]"


def plan(args):
    runs = []
    for gpus in args.gpus:  # variants interleaved run by run, so that drifts in the machine hit them alike
        for i in range(args.runs):
            for name, flags in args.variant:
                log = os.path.join(args.campaign, f"{name}_g{gpus}_r{i}.txt")
                cmd = (["mpirun", "-np", str(gpus)] + split(args.mpirun_args, "--mpirun-args") if gpus > 1 else [])
                cmd += split(args.trainer, "--trainer") + args.common + split(flags, f"--variant {name}")
                cmd += ["--seed", str(args.seed0 + i), "--log-file", log]
                runs.append((name, gpus, i, log, cmd))
    return runs


def check_planned(run, name, gpus, seed, want, allow):
    """Raises ToolError unless the complete log `run` is the run planned there: its configuration
    names this seed and GPU count, and the flags' values."""
    redo = "; --start-over moves the campaign's old logs aside, or move this log out of the folder"
    if not run.config:
        raise ToolError(f"{run.path}: complete, but no JSON lines beside it name its configuration: it cannot be told "
                        f"to be this campaign's run{redo}")
    if run.seed != seed:
        raise ToolError(f"{run.path}: a run of seed {run.seed}, where this campaign runs seed {seed} (--seed0 + run index){redo}")
    if run.world_size is not None and run.world_size != gpus:
        raise ToolError(f"{run.path}: a run on {run.world_size} GPU(s), where this campaign runs {gpus} there{redo}")
    for k, v in want.items():
        if k in run.config and k not in speedrun_logs.PER_RUN and k not in allow and \
                not speedrun_logs.same_value(run.config[k], v):
            raise ToolError(f"{run.path}: its configuration has {k} {run.config[k]!r}, where this campaign runs variant {name} "
                            f"with --{k.replace('_', '-')} {'' if v is True else v}".rstrip() + redo)


def check_one_setting(done, variant_keys, allow):
    """Raises ToolError unless the complete runs share every recorded setting but the variants'
    flags and the GPU count. done: [(run, name)]."""
    skip = set(variant_keys) | set(allow) | {"world_size"} | set(speedrun_logs.DERIVED)
    first = None
    for run, _ in done:
        s = {k: v for k, v in speedrun_logs.setting(run).items() if k not in skip}
        if first is None:
            first = (run, s)
            continue
        r0, s0 = first
        diff = [k for k in sorted(set(s) | set(s0)) if s.get(k, "(absent)") != s0.get(k, "(absent)")]
        if diff:
            k = diff[0]
            raise ToolError(f"{run.path}: {k} {s.get(k, '(absent)')!r}, where {r0.path} has {s0.get(k, '(absent)')!r}: the "
                            "campaign's runs were made under different settings (data, validation tokens, the trainer's commit, "
                            "the GPU, ...); --start-over to begin again, or --allow-differ " + k)


def finished(run):
    """Whether a parsed log is a run that needs no rerun: complete, or stopped at a loss logged as
    diverged (its steps from 1 without a gap to there: speedrun_logs.Run.state)."""
    return run.state()[0] in ("complete", "diverged")


def parse_or_none(log):
    """The parsed log, or None (with a warning) when it cannot be read as one run."""
    try:
        return speedrun_logs.parse(log)
    except ToolError as e:
        print(f"ab_run: warning: {e}", file=sys.stderr)
        return None


def removal_variants(args):
    """A removal campaign's variants ([(name, flags)]: "full", then a leg a removal, each run
    from its recipe file in CAMPAIGN/recipes/) and what it records: {"record": campaign.json's
    "removal", "files": {name: recipe text}, "log": {name: {log name: value text}}}. Refuses
    (removals.Refusal: exit 2), before anything runs or is written, what scripts/removals.py
    names."""
    if args.variant:
        raise removals.Refusal("--variant: a removal campaign (--recipe, --remove, --removals) makes its own variants: "
                               "the full recipe and one leg a removal")
    if args.recipe is None:
        raise removals.Refusal("--remove/--removals: give the recipe they remove from, --recipe FILE")
    if not args.remove and not args.removals:
        raise removals.Refusal("--recipe: a removal campaign: give the removals, --remove KEY[,KEY...] or --removals FILE")
    for flag in ("--recipe", "--preset", "--print-recipe", "--print-schema"):
        if any(t == flag or t.startswith(flag + "=") for t in args.common):
            raise removals.Refusal(f"{flag} among the common flags: a removal campaign runs --recipe's recipe "
                                   "(and its legs'); give it as --recipe FILE before '--'")
    text = removals.recipe_text(args.recipe)
    asked = removals.from_flags(args.remove) + (removals.from_file(args.removals) if args.removals else [])
    trainer = split(args.trainer, "--trainer")
    schema = removals.load_schema(trainer)
    full = removals.resolved(trainer, args.recipe, args.common, f"--recipe {args.recipe}")
    legs = removals.resolve(asked, schema, full)
    removals.verify(trainer, args.common, text, args.recipe, legs, schema, full)
    files = {removals.FULL: text}
    files.update({leg["name"]: removals.leg_text(text, args.recipe, leg) for leg in legs})
    folder = os.path.join(args.campaign, "recipes")
    variants = [(name, "--recipe " + shlex.quote(os.path.join(folder, name + ".toml"))) for name in files]
    record = {"recipe": args.recipe, "recipe_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
              "legs": [{"name": removals.FULL, "set": {}, "was": {}, "log": {}, "off": []}] + legs}
    text_of = lambda v: repr(v) if isinstance(v, float) else str(v)  # noqa: E731  (speedrun_logs.same_value reads it)
    log = {leg["name"]: {k: text_of(v) for k, v in leg["log"].items()} for leg in record["legs"]}
    return variants, {"record": record, "files": files, "log": log}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--campaign", required=True, help="directory for the logs")
    ap.add_argument("--gpus", default="1", help="comma-separated GPU counts (default 1)")
    ap.add_argument("--runs", type=int, default=5, help="runs per variant and GPU count (default 5)")
    ap.add_argument("--variant", action="append", default=[], help="NAME='FLAGS' (repeatable; the first is the baseline)")
    ap.add_argument("--recipe", help="a removal campaign: the recipe file run whole and with each removal (instead of --variant)")
    ap.add_argument("--remove", action="append", default=[], metavar="KEY[=VALUE][,...]",
                    help="a removal campaign: recipe keys to turn off one at a time, each to its neutral value (the trainer's "
                         "--print-schema) or VALUE (repeatable)")
    ap.add_argument("--removals", metavar="FILE", help="a removal campaign: a TOML file of [[removal]] tables (scripts/removals.py)")
    ap.add_argument("--seed0", type=int, default=1000)
    ap.add_argument("--trainer", default="./train_gpt")
    ap.add_argument("--mpirun-args", default="", help="extra mpirun arguments (host file, --bind-to ...)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and what would be skipped")
    ap.add_argument("--start-over", action="store_true",
                    help="the campaign's flags changed: move its old logs into CAMPAIGN/old-DATE-TIME/ and run everything anew")
    ap.add_argument("--allow-differ", action="append", default=[], metavar="KEY",
                    help="a setting of the runs' configurations (git_commit, gpu, ...) that may differ between them (repeatable)")
    ap.add_argument("common", nargs="*", help="flags for every run (after --)")
    args = ap.parse_args(argv)
    gpus = args.gpus.split(",")
    if len(gpus) > MAX_GPU_COUNTS or not all(g.strip().isdigit() and len(g.strip()) <= 6 for g in gpus):
        ap.error(f"--gpus wants at most {MAX_GPU_COUNTS} comma-separated whole numbers, got {_short(args.gpus, 80)}")
    args.gpus = [int(g) for g in gpus]
    if not all(1 <= g <= MAX_GPUS for g in args.gpus) or len(set(args.gpus)) != len(args.gpus):
        ap.error(f"--gpus wants distinct GPU counts from 1 to {MAX_GPUS}, got {_short(args.gpus, 80)}")
    if not 1 <= args.runs <= MAX_RUNS:
        ap.error(f"--runs {args.runs}: want 1 to {MAX_RUNS} runs per variant and GPU count")
    if not 0 <= args.seed0 <= MAX_SEED - (args.runs - 1):
        ap.error(f"--seed0 {_short(args.seed0, 40)}: want 0 to {MAX_SEED - (args.runs - 1)} (the last run's seed, --seed0 + "
                 f"--runs - 1, must fit train_gpt's 64-bit --seed)")
    removal = None
    if args.remove or args.removals or args.recipe is not None:
        try:
            args.variant, removal = removal_variants(args)
        except removals.Refusal as e:
            ap.error(str(e))
    elif not args.variant:
        ap.error("give --variant NAME=FLAGS (twice or more), or a removal campaign: --recipe FILE with --remove or --removals")
    if len(args.variant) > MAX_VARIANTS:
        ap.error(f"--variant given {len(args.variant)} times: at most {MAX_VARIANTS} variants")
    if len(args.gpus) * args.runs * len(args.variant) > MAX_PLANNED:
        ap.error(f"--gpus x --runs x --variant plans {len(args.gpus) * args.runs * len(args.variant)} runs: at most {MAX_PLANNED}")
    variants = []
    for v in args.variant if removal is None else []:
        name, sep, flags = v.partition("=")
        if not sep or not name or "/" in name or "_g" in name:
            ap.error(f"--variant wants NAME=FLAGS with a plain NAME (no '/' or '_g'), got {v!r}")
        variants.append((name, flags))
    if removal is not None:
        variants = list(args.variant)
    if len({n for n, _ in variants}) != len(variants):
        ap.error("variant names must differ")
    args.variant = variants
    if os.path.exists(args.campaign) and not os.path.isdir(args.campaign):
        raise ToolError(f"--campaign {args.campaign}: exists and is not a folder")
    runs = plan(args)  # checks the flags' quoting before anything is written
    manifest = {"variants": variants, "gpus": args.gpus, "runs": args.runs, "seed0": args.seed0, "common": args.common,
                "trainer": args.trainer, "mpirun_args": args.mpirun_args,
                "data": data_fingerprint(args.common + [t for _, f in variants for t in split(f, "--variant")])}
    if removal is not None:
        manifest["removal"] = removal["record"]
    # the data each variant reads: a removal campaign's legs are written below, and read the recipe's data
    data_variants = variants if removal is None else [(n, f"--recipe {shlex.quote(args.recipe)}") for n, _ in variants]
    for name, flags in data_variants:  # the same pattern for both: a flag error (exit 2), as train_gpt makes it
        own = args.common + split(flags, f"--variant {name}")
        pattern, val = data_patterns(own)  # a pattern not given is train_gpt's default
        if pattern is not None and pattern == val and "--allow-train-on-val" not in own:
            ap.error(f"variant {name}: --train-data and --val-data are both {pattern!r}: its runs would validate on the data they "
                     "train on; name other validation shards, or give --allow-train-on-val to do so on purpose")
    why = train_on_val(args.common, data_variants, manifest["data"])
    if why:
        raise ToolError(why)
    common = speedrun_logs.flag_settings(args.common)
    want = {}  # per variant, the flags of its runs: its own first (they are what a misplaced log gets wrong), then the common
    for name, flags in variants:
        own = speedrun_logs.flag_settings(split(flags, f"--variant {name}"))
        own.update(removal["log"][name] if removal else {})  # a leg's keys, as its runs' configurations record them
        want[name] = dict(own, **{k: v for k, v in common.items() if k not in own})
    variant_keys = {k for name, flags in variants for k in speedrun_logs.flag_settings(split(flags, "--variant"))}
    variant_keys |= {k for log in (removal["log"].values() if removal else []) for k in log}
    seeds = range(args.seed0, args.seed0 + args.runs)
    if args.dry_run:
        if os.path.isdir(args.campaign) and not args.start_over:
            check_record(args.campaign, manifest, False)  # says what a real run would refuse
    else:
        os.makedirs(args.campaign, exist_ok=True)
        old = check_record(args.campaign, manifest, args.start_over)
        manifest["plan"] = planned(old, [n for n, _ in variants], args.gpus, seeds)
        # the report reads the variant order here
        write_whole(os.path.join(args.campaign, "campaign.json"), json.dumps(manifest, indent=1))
        if removal is not None:  # the legs' recipes, the same text at every start of the same campaign
            os.makedirs(os.path.join(args.campaign, "recipes"), exist_ok=True)
            for name, text in removal["files"].items():
                write_whole(os.path.join(args.campaign, "recipes", name + ".toml"), text)
    for leg in removal["record"]["legs"] if removal is not None else []:
        print(f"leg {leg['name']}: " + (", ".join(f"{k} = {v!r} (was {leg['was'][k]!r})" for k, v in leg["set"].items())
                                        or f"{args.recipe} whole"))
    todo, done = [], []
    for r in runs:
        name, gpus, i, log, _ = r
        parsed = parse_or_none(log) if os.path.exists(log) else None
        if parsed is not None and finished(parsed):
            check_planned(parsed, name, gpus, args.seed0 + i, want[name], args.allow_differ)
            done.append((parsed, name))
            print(f"skip ({parsed.state()[0]}): {log}")
        else:
            todo.append(r)
    check_one_setting(done, variant_keys, args.allow_differ)
    print(f"ab_run: {len(runs)} runs, {len(runs) - len(todo)} complete, {len(todo)} to run", flush=True)
    for k, (name, gpus, i, log, cmd) in enumerate(todo, 1):
        print(f"[{k}/{len(todo)}] {name} on {gpus} GPU(s), run {i}: {shlex.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        for stale in (log, os.path.splitext(log)[0] + ".jsonl"):
            if os.path.exists(stale):  # a partial log is kept aside and its run started again
                aside = os.path.join(args.campaign, "incomplete")
                os.makedirs(aside, exist_ok=True)
                dst = os.path.join(aside, time.strftime("%Y%m%d-%H%M%S-") + os.path.basename(stale))
                os.replace(stale, dst)
                print(f"    incomplete log moved to {dst}", flush=True)
        t0 = time.time()
        try:
            rc = subprocess.call(cmd)
        except OSError as e:
            raise ToolError(f"cannot start {cmd[0]!r} (--trainer / mpirun): {e.strerror or e}")
        parsed = parse_or_none(log) if os.path.exists(log) else None
        diverged = parsed is not None and parsed.state()[0] == "diverged"  # train_gpt stops such a run with exit 1
        if (rc != 0 and not diverged) or parsed is None or not finished(parsed):
            why = f"exit code {rc}" if rc != 0 else "no log" if parsed is None and not os.path.exists(log) else \
                "its log is not a complete run: " + (parsed.state()[1] if parsed is not None else "unreadable")
            print(f"ab_run: error: run {log} failed ({why}); fix it and run the same command again to resume",
                  file=sys.stderr)
            return 1
        check_planned(parsed, name, gpus, args.seed0 + i, want[name], args.allow_differ)
        done.append((parsed, name))
        check_one_setting(done, variant_keys, args.allow_differ)
        print(f"    {'diverged (' + parsed.state()[1] + ')' if diverged else 'done'} in {time.time() - t0:.0f} s", flush=True)
    gone = [(run, name) for run, name in done if run.state()[0] == "diverged"]
    if gone:
        print(f"ab_run: {len(gone)} of {len(runs)} runs diverged: " +
              "; ".join(f"{name} on {run.world_size or '?'} GPU(s), seed {run.seed} ({run.state()[1]}): {run.path}" for run, name in gone),
              flush=True)
    return 0


if __name__ == "__main__":
    run_tool(main, "ab_run")
