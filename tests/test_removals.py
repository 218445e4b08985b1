"""Removal campaigns (scripts/ab_run.py --recipe R --remove KEY..., scripts/removals.py, and
scripts/ab_report.py's removal table) with tests/fake_trainer.py standing in for train_gpt: a
campaign of three removals runs interleaved with paired seeds, writes each leg's recipe, resumes
after a failed run, and reports each removal's deltas against the full recipe, which must be the
ones the fake trainer's formulas give (mechanism, jitter, step_extra), with scipy's confidence
intervals and p and statsmodels' pairs needed; then every refusal: exit 2 naming the key, flag
or file, before anything is run or written.

    python3 tests/test_removals.py
"""
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)
from tool_errors import require  # noqa: E402
require("numpy", "scipy", "statsmodels", "matplotlib", "tomlkit", suite="removals")
from scipy import stats  # noqa: E402
from statsmodels.stats.power import TTestPower  # noqa: E402
from harness import check, finish  # noqa: E402

warnings.simplefilter("ignore", RuntimeWarning)  # statsmodels' power at large effects (scipy's noncentral t)

RUN = [sys.executable, os.path.join(ROOT, "scripts", "ab_run.py")]
REPORT = [sys.executable, os.path.join(ROOT, "scripts", "ab_report.py")]
FAKE = f"{shlex.quote(sys.executable)} {shlex.quote(os.path.join(HERE, 'fake_trainer.py'))}"
TMP = tempfile.mkdtemp(prefix="removals_")
RECIPE = os.path.join(TMP, "r.toml")
with open(RECIPE, "w") as f:
    f.write("""# a recipe of the fake trainer's keys
[model]
layers = 4
[attention]
doc_mask = 1
prefix_tokens = 0
[run]
steps = 20
[optimizer.muon]
momentum_start = 0.85
momentum_end = 0.95
[schedule]
lr_cooldown = 600
window_start = 64  # tokens
window_end = 1792
""")
FULL = {"attention.doc_mask": 1, "schedule.window_start": 64, "optimizer.muon.momentum_start": 0.85, "schedule.lr_cooldown": 600}
DEFAULTS = dict(FULL)  # the fake trainer's defaults are this recipe's values of these keys
STEPS, SEEDS = 20, [1000, 1001, 1002, 1003]


def run(cmd, env=None, cwd=TMP):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd, env=dict(os.environ, **(env or {})))
    return r.returncode, r.stdout, r.stderr


def ab_run(campaign, *flags, env=None):
    return run(RUN + ["--campaign", campaign, "--trainer", FAKE] + list(flags), env=env)


# the fake trainer's formulas (tests/fake_mechanisms.py), which give the expected table
from fake_mechanisms import jitter, mechanism, step_extra  # noqa: E402



def deltas(change):
    """Per seed, the leg's final loss and step average less the full recipe's (the report's
    step average is the run's train_time over its steps after the 10th)."""
    leg = dict(FULL, **change)
    loss = [mechanism(leg) + jitter(s, leg) - mechanism(FULL) - jitter(s, FULL) for s in SEEDS]
    time = [(step_extra(s, leg) - step_extra(s, FULL)) * STEPS / (STEPS - 10) for s in SEEDS]
    return loss, time


def expected_cells(d, digits):
    """The report's cells for these differences: mean, [lo, hi], paired p, pairs needed."""
    n = len(d)
    m = sum(d) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    p = stats.ttest_1samp(d, 0.0).pvalue if sd > 0 else (1.0 if m == 0 else 0.0)
    return m, half, p, sd


# ------------------------------------------------------------------ a campaign of three removals
camp = os.path.join(TMP, "c")
flags = ["--runs", str(len(SEEDS)), "--recipe", RECIPE, "--remove", "attention.doc_mask,schedule.window_start",
         "--remove", "schedule.lr_cooldown"]
rc, out, err = ab_run(camp, *flags, env={"FAKE_FAIL_SEED": "1002"})  # the first run of seed 1002 fails: an interrupted campaign
check("a campaign whose run fails stops with exit 1, naming the run", rc == 1 and "full_g1_r2.txt failed" in err, err[-500:])
ran = re.findall(r"^\[\d+/\d+\] (\S+) on 1 GPU\(s\), run (\d+)", out, re.M)
check("the legs take turns run by run: full, then each removal, for each seed",
      ran[:5] == [("full", "0"), ("no-attention.doc-mask", "0"), ("no-schedule.window-start", "0"), ("no-schedule.lr-cooldown", "0"),
                  ("full", "1")], str(ran[:5]))
rc, out, err = ab_run(camp, *flags)
check("the same command resumes: 8 runs skipped, 8 run, exit 0",
      rc == 0 and "16 runs, 8 complete, 8 to run" in out, out[-800:] + err[-500:])
logs = sorted(f for f in os.listdir(camp) if f.endswith(".txt"))
check("16 logs: 4 legs x 4 seeds", len(logs) == 16, str(logs))
rec = json.load(open(os.path.join(camp, "campaign.json")))
legs = rec.get("removal", {}).get("legs", [])
check("campaign.json records the removals: full and three legs, their keys and values",
      [(leg["name"], leg["set"]) for leg in legs] ==
      [("full", {}), ("no-attention.doc-mask", {"attention.doc_mask": 0}), ("no-schedule.window-start", {"schedule.window_start": 1792}),
       ("no-schedule.lr-cooldown", {"schedule.lr_cooldown": 1})], str(legs))
check("campaign.json records the recipe's SHA-256", len(rec["removal"].get("recipe_sha256", "")) == 64, str(rec["removal"]))
with open(os.path.join(camp, "recipes", "no-schedule.window-start.toml"), "rb") as f:
    leg_recipe = tomllib.load(f)
check("a leg's recipe: the recipe with its key at the neutral value (window_end's), the rest as it was",
      leg_recipe["schedule"]["window_start"] == 1792 and leg_recipe["schedule"]["lr_cooldown"] == 600 and
      leg_recipe["attention"]["doc_mask"] == 1, str(leg_recipe))
check("the full leg's recipe is the recipe's bytes",
      open(os.path.join(camp, "recipes", "full.toml")).read() == open(RECIPE).read())
cfg = json.loads(open(os.path.join(camp, "no-attention.doc-mask_g1_r3.jsonl")).readline())
check("a leg's run records its recipe, its key's value and the campaign's seed",
      cfg["doc_mask"] == 0 and cfg["recipe"].endswith("no-attention.doc-mask.toml") and cfg["seed"] == 1003, str(cfg))
rc, out, err = ab_run(camp, *flags)
check("run again: all 16 complete, nothing run", rc == 0 and "16 runs, 16 complete, 0 to run" in out, out[-300:] + err[-300:])

# ------------------------------------------------------------------ the report's table
rep_dir = os.path.join(TMP, "rep")
rc, out, err = run(REPORT + ["--logs-dir", camp, "--out", rep_dir, "--title", "removals"])
check("report: exit 0", rc == 0, err[-800:])
report = open(os.path.join(rep_dir, "report.md")).read() if rc == 0 else ""
check("report: the removals' plot beside it", os.path.exists(os.path.join(rep_dir, "removals.png")))
rows = {m.group(1): [c.strip() for c in m.group(0).strip("|").split("|")]
        for m in re.finditer(r"^\| (no-[^ |]+) \| [^|]*(?:was)[^|]*\|.*$", report, re.M)}
check("report: one row a removal", sorted(rows) == ["no-attention.doc-mask", "no-schedule.lr-cooldown", "no-schedule.window-start"],
      str(sorted(rows)))
for name, change in (("no-attention.doc-mask", {"attention.doc_mask": 0}), ("no-schedule.window-start", {"schedule.window_start": 1792}),
                     ("no-schedule.lr-cooldown", {"schedule.lr_cooldown": 1})):
    row = rows.get(name, [""] * 12)
    check(f"{name}: 4 pairs, seeds 1000-1003", row[3] == "4 (1000-1003)", str(row))
    loss, time = deltas(change)
    for what, d, digits, cells in (("loss", loss, 4, row[4:8]), ("step avg", time, 2, row[8:12])):
        m, half, p, sd = expected_cells(d, digits)
        tol = 0.5 * 10 ** -digits + 1e-9  # half a unit of the last printed digit (the logs' sums round otherwise than these)
        ci = re.fullmatch(r"\[([-+0-9.]+), ([-+0-9.]+)\]", cells[1])
        check(f"{name}: delta {what} mean {m:+.{digits + 2}f} (the formulas'), to {tol:.1g}",
              re.fullmatch(r"[-+][0-9.]+", cells[0]) is not None and abs(float(cells[0]) - m) <= tol, str(cells))
        check(f"{name}: delta {what} 95% CI [{m - half:+.{digits + 2}f}, {m + half:+.{digits + 2}f}] (scipy's t quantile), to {tol:.1g}",
              ci is not None and abs(float(ci[1]) - (m - half)) <= tol and abs(float(ci[2]) - (m + half)) <= tol, str(cells))
        try:
            got_p = float(cells[2])
        except ValueError:
            got_p = math.nan
        check(f"{name}: delta {what} paired p {p:.3g} (scipy's ttest_1samp of the differences), to 0.5e-4 or 5% of itself "
              "below 1e-4 (as printed)", abs(got_p - p) <= max(0.5e-4 + 1e-9, 0.05 * p), str(cells))
        if sd > 0 and m != 0:
            n = int(cells[3]) if cells[3].isdigit() else -1
            pw = lambda k: TTestPower().power(effect_size=abs(m) / sd, nobs=k, alpha=0.05) if k >= 2 else 0.0  # noqa: E731
            check(f"{name}: delta {what}: pairs needed {cells[3]}: statsmodels' paired power is 0.8 or more there, less one "
                  "pair fewer", n >= 2 and pw(n) >= 0.8 and (n == 2 or pw(n - 1) < 0.8), f"{cells} {pw(n)}")
        else:
            check(f"{name}: delta {what}: no pairs needed without a spread or a difference", cells[3].startswith("n/a"), str(cells))

# ------------------------------------------------------------------ a campaign file, and a resume refused
cfile = os.path.join(TMP, "removals.toml")
with open(cfile, "w") as f:
    f.write('[[removal]]\nname = "momentum-and-window"\nkeys = ["optimizer.muon.momentum_start"]\n'
            'set = { "schedule.window_start" = 128 }\n[[removal]]\nkeys = ["attention.doc_mask"]\n')
rc, out, err = ab_run(os.path.join(TMP, "file"), "--runs", "2", "--recipe", RECIPE, "--removals", cfile, "--dry-run")
check("a campaign file: a removal of two keys (one neutral, one given) and one of one, dry run",
      rc == 0 and "leg momentum-and-window: optimizer.muon.momentum_start = 0.95 (was 0.85), schedule.window_start = 128 (was 64)"
      in out and "leg no-attention.doc-mask" in out and not os.path.exists(os.path.join(TMP, "file")), out[-800:] + err[-500:])
original = open(RECIPE).read()
with open(RECIPE, "a") as f:
    f.write("# edited\n")
rc, out, err = ab_run(camp, *flags)
check("resuming with the recipe changed is refused (exit 1), naming the removal record",
      rc == 1 and "removal" in err and "Traceback" not in err, err[-500:])
with open(RECIPE, "w") as f:
    f.write(original)

# ------------------------------------------------------------------ refusals: exit 2, named, nothing written
gone = os.path.join(TMP, "never")
CASES = [
    ("an unknown key", ["--recipe", RECIPE, "--remove", "attention.nope"], "attention.nope"),
    ("a key without a neutral value", ["--recipe", RECIPE, "--remove", "model.layers"], "model.layers has no neutral value"),
    ("a key given twice", ["--recipe", RECIPE, "--remove", "attention.doc_mask", "--remove", "attention.doc_mask"],
     "attention.doc_mask is removed twice"),
    ("a key given twice with different values", ["--recipe", RECIPE, "--remove", "schedule.lr_cooldown=1,schedule.lr_cooldown=2"],
     "schedule.lr_cooldown is given twice, with 1"),
    ("an empty list", ["--recipe", RECIPE, "--remove", ""], "an empty key"),
    ("an empty item", ["--recipe", RECIPE, "--remove", "attention.doc_mask,"], "an empty key"),
    ("an empty value", ["--recipe", RECIPE, "--remove", "attention.doc_mask="], "an empty value"),
    ("a recipe that does not exist", ["--recipe", os.path.join(TMP, "nope.toml"), "--remove", "attention.doc_mask"],
     "nope.toml: no such file"),
    ("a recipe that is a folder", ["--recipe", TMP, "--remove", "attention.doc_mask"], "a folder"),
    ("a removal equal to the recipe's own value", ["--recipe", RECIPE, "--remove", "attention.prefix_tokens"],
     "attention.prefix_tokens = 0 is the recipe's own value"),
    ("an explicit value equal to the recipe's", ["--recipe", RECIPE, "--remove", "schedule.lr_cooldown=600"],
     "schedule.lr_cooldown = 600 is the recipe's own value"),
    ("a common flag that overrides the removed key", ["--recipe", RECIPE, "--remove", "attention.doc_mask", "--", "--doc-mask", "1"],
     "--doc-mask, which overrides"),
    ("a value the trainer refuses", ["--recipe", RECIPE, "--remove", "model.layers=3"], "must be even"),
    ("a value of the wrong type", ["--recipe", RECIPE, "--remove", "schedule.lr_cooldown=abc"], "schedule.lr_cooldown wants an integer"),
    ("a data key", ["--recipe", RECIPE, "--remove", "data.val=x"], "data.val is the data's"),
    ("--variant with --remove", ["--recipe", RECIPE, "--remove", "attention.doc_mask", "--variant", "a=--steps 3"],
     "makes its own variants"),
    ("--remove without --recipe", ["--remove", "attention.doc_mask"], "--recipe FILE"),
    ("--recipe without removals", ["--recipe", RECIPE], "give the removals"),
    ("--recipe among the common flags", ["--recipe", RECIPE, "--remove", "attention.doc_mask", "--", "--recipe", RECIPE],
     "--recipe among the common flags"),
    ("a campaign file that does not exist", ["--recipe", RECIPE, "--removals", os.path.join(TMP, "nope.toml")], "no such file"),
    ("a recipe that is a FIFO", ["--recipe", os.path.join(TMP, "pipe.toml"), "--remove", "attention.doc_mask"], "not a regular file"),
    ("a campaign file that is a FIFO", ["--recipe", RECIPE, "--removals", os.path.join(TMP, "pipe.toml")], "not a regular file"),
]
os.mkfifo(os.path.join(TMP, "pipe.toml"))
for body, what in (("", "no [[removal]] tables"), ("[[removal]]\n", "no keys"), ("[[removal]]\nkeys = ['a']\nvalue = 1\n", "unknown key value"),
                   ("x = 1\n", "unknown key x"), ("[[removal]\n", "not a TOML file"),
                   ("[[removal]]\nset = { 'attention.doc_mask' = 'off' }\n", "attention.doc_mask wants an integer"),
                   ("[[removal]]\nname = 'a_g1'\nkeys = ['attention.doc_mask']\n", "not a plain name"),
                   ("[[removal]]\nname = 'full'\nkeys = ['attention.doc_mask']\n", "the name full")):
    path = os.path.join(TMP, f"bad{len(CASES)}.toml")
    with open(path, "w") as f:
        f.write(body)
    CASES.append((f"a campaign file: {what}", ["--recipe", RECIPE, "--removals", path], what))
for name, args, want in CASES:
    rc, out, err = ab_run(gone, *args)
    check(f"refused: {name}: exit 2, '{want}' named, nothing written",
          rc == 2 and want in err and "Traceback" not in err and not os.path.exists(gone), f"rc {rc}: {err[-600:]}")

# ------------------------------------------------------------------ the report refuses a removal record that is not one
bad = os.path.join(TMP, "badrec")
shutil.copytree(camp, bad)
rec = json.load(open(os.path.join(bad, "campaign.json")))
rec["removal"]["legs"] = rec["removal"]["legs"][:2]
json.dump(rec, open(os.path.join(bad, "campaign.json"), "w"))
rc, out, err = run(REPORT + ["--logs-dir", bad, "--out", os.path.join(TMP, "badrep")])
check("report: a removal record whose legs are not the variants is refused (exit 1), naming it",
      rc == 1 and "campaign.json: removal" in err and "Traceback" not in err, err[-500:])
rec = json.load(open(os.path.join(camp, "campaign.json")))
rec["removal"]["legs"][1]["log"]["doc_mask"] = 1
json.dump(rec, open(os.path.join(bad, "campaign.json"), "w"))
rc, out, err = run(REPORT + ["--logs-dir", bad, "--out", os.path.join(TMP, "badrep")])
check("report: a leg's run that does not record the leg's value is refused (exit 1)",
      rc == 1 and "doc_mask" in err and "Traceback" not in err, err[-500:])

shutil.rmtree(TMP, ignore_errors=True)
finish("removals")
