"""Every Python tool's numbers read from files, driven through the same hostile values: a number
as text, 0, negative, NaN, infinity, huge (1e308, 10**400), nested 100000 deep, a list where a
number belongs, true, an object, and the field missing. Each case must end with exit 1 or 2, one
line on standard error naming the file and the field (JSON nested past the parser's depth: the file
and the nesting), no traceback, within LIMIT_S; a value the
field legitimately takes (listed per field, e.g. 0 for an optimiser time) must be accepted (exit
0). Prints one line per case.

    python3 tests/test_hostile_numbers.py

Needs numpy, scipy and statsmodels (ab_report's and mask_pairs'). The files are written here from a
valid template per tool (checked to be accepted first), one field replaced by the raw JSON text
of each hostile value.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from harness import check, finish, outcome_problems  # noqa: E402
from tool_errors import require  # noqa: E402

require("numpy", "scipy", "statsmodels", suite="hostile-numbers")

PY = sys.executable
S = os.path.join(ROOT, "scripts")
T = tempfile.mkdtemp(prefix="hostile_numbers_")
LIMIT_S = 60  # a case still running after this has hung
MISSING = None
VALID = "(the template's own value)"  # a raw value that leaves the field as the template has it
HOSTILE = [("text", '"5"'), ("zero", "0"), ("negative", "-1"), ("NaN", "NaN"), ("infinity", "Infinity"),
           ("-infinity", "-Infinity"), ("1e308", "1e308"), ("10**400", "1" + "0" * 400),
           ("nested 100000 deep", "[" * 100000 + "]" * 100000), ("a list", "[[[1]]]"), ("true", "true"),
           ("an object", '{"a": 1}'), ("null", "null"), ("missing", MISSING)]
PLACE = "@@HOSTILE@@"


def dumps(obj, raw):
    """JSON text of obj with the string PLACE replaced by the raw text; the key whose value is
    PLACE is left out when raw is MISSING."""
    text = json.dumps(obj)
    if raw is VALID:
        return text
    if raw is MISSING:
        return re.sub(r'(, )?"[^"]+": "' + PLACE + '"(, )?', lambda m: ", " if m.group(1) and m.group(2) else "", text)
    return text.replace(f'"{PLACE}"', raw)


def put(obj, dotted, raw):
    """A copy of obj (JSON) with the field at a dotted path (list indices as numbers) set to PLACE
    (left as it is for VALID)."""
    obj = json.loads(json.dumps(obj))
    if raw is VALID:
        return obj
    *head, last = [int(k) if k.isdigit() else k for k in dotted.split(".")]
    o = obj
    for k in head:
        o = o[k]
    o[last] = PLACE
    return obj


def run(cmd):
    t0 = time.time()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=LIMIT_S, cwd=ROOT)
        rc, out, err = r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        rc, out, err = "hung", (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace")
    return rc, out, err, time.time() - t0


# ------------------------------------------------------------------------------------ the tools' inputs
# (the bandwidth measured on the runs' card, as scaling_model --check requires)
BW = {"ranks": 2, "device": "NVIDIA H100 80GB HBM3",
      "results": [{"op": "reduce-scatter fp32", "busbw_GBs": 270.0}, {"op": "all-gather bf16", "busbw_GBs": 250.0}]}
CONFIG = {"event": "config", "vocab": 50304, "width": 768, "layers": 12, "hidden": 3072, "world_size": 1, "gpu": "NVIDIA H100 80GB HBM3"}
SUMMARY = {"event": "summary", "median_step_ms": 869.5, "optimizer_ms": 9.0}


def jsonl(*lines):
    return "\n".join(lines) + "\n"


def write(name, text):
    p = os.path.join(T, name)
    with open(p, "w") as f:
        f.write(text)
    return p


GOOD_BW = write("bw.json", json.dumps(BW))
GOOD_ONE = write("one.jsonl", jsonl(json.dumps(CONFIG), json.dumps(SUMMARY)))
SM = [PY, os.path.join(S, "scaling_model.py")]


def scaling_bandwidth(dotted):
    def make(raw, name):
        p = write(name + ".json", dumps(put(BW, dotted, raw), raw))
        return SM + ["--one", GOOD_ONE, "--bandwidth", p, "--check", GOOD_ONE], p
    return make


def scaling_one(event, key, role):
    def make(raw, name):
        c, s = (put(CONFIG, key, raw), SUMMARY) if event == "config" else (CONFIG, put(SUMMARY, key, raw))
        p = write(name + ".jsonl", jsonl(dumps(c, raw), dumps(s, raw)))
        return (SM + ["--one", p, "--bandwidth", GOOD_BW] if role == "--one" else
                SM + ["--one", GOOD_ONE, "--bandwidth", GOOD_BW, "--check", p]), p
    return make


# peer/full_run_logs.py table: a finished 20-step run of train_gpt on 1 GPU
FR_TRAIN = "data/x_train_*.bin"
FR_EVENTS = [{"event": "config", "world_size": 1, "steps": 20, "train_data": FR_TRAIN},
             {"event": "startup", "startup_s": 11.8},
             {"event": "val", "step": 15, "train_time_ms": 1000.0, "val_loss": 5.0},
             {"event": "val", "step": 20, "train_time_ms": 2300.0, "val_loss": 4.5},
             {"event": "summary", "peak_memory_mib": 27137.0}]


def full_run(dotted):
    def make(raw, name):
        d = os.path.join(T, name)
        os.makedirs(d)
        evs = put(FR_EVENTS, dotted, raw)
        p = os.path.join(d, "train_gpt_g1.jsonl")
        with open(p, "w") as f:
            f.write(jsonl(*(dumps(e, raw) for e in evs)))
        return [PY, os.path.join(ROOT, "peer", "full_run_logs.py"), "table", d, "1", "20", FR_TRAIN], p
    return make


# ablations/mask_pairs.py: a round of bench_attention's table mode (a prefix case and its partner)
CASE = {"case": "prefix", "T": 4096, "H": 2, "D": 64, "causal": 1, "window": 0, "blocks": 0, "bidir": 0, "docs": 1,
        "prefix": 64, "fwd_tflops": 100.0, "fwdbwd_tflops": 90.0}


def mask_pairs(key):
    def make(raw, name):
        plain = dict(CASE, case="plain", prefix=0)
        p = write(name + ".json", jsonl(dumps(put(CASE, key, raw), raw), json.dumps(plain)))
        return [PY, os.path.join(ROOT, "ablations", "mask_pairs.py"), p], p
    return make


# a campaign of scripts/ab_run.py (tests/fake_trainer.py in train_gpt's place), for ab_report and ab_run
CAMP = os.path.join(T, "campaign")
FAKE = f"{shlex.quote(PY)} {shlex.quote(os.path.join(HERE, 'fake_trainer.py'))}"
AB_RUN = [PY, os.path.join(S, "ab_run.py"), "--runs", "2", "--trainer", FAKE, "--variant", "uni=--window-mask uni",
          "--variant", "bi=--window-mask bi"]
r = subprocess.run(AB_RUN + ["--campaign", CAMP, "--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
check("a campaign made by ab_run with the stand-in trainer", r.returncode == 0, r.stdout + r.stderr)
with open(os.path.join(CAMP, "campaign.json")) as f:
    RECORD = json.load(f)


def campaign(dotted, tool):
    def make(raw, name):
        d = os.path.join(T, name)
        shutil.copytree(CAMP, d)
        p = os.path.join(d, "campaign.json")
        with open(p, "w") as f:
            f.write(dumps(put(RECORD, dotted, raw), raw))
        if tool == "ab_report":
            return [PY, os.path.join(S, "ab_report.py"), "--logs-dir", d, "--out", os.path.join(T, name + "_report")], p
        return AB_RUN + ["--campaign", d, "--dry-run", "--", "--causal", "0", "--allow-target-leak"], p
    return make


# (tool and file, field named in a refusal, how to make the case, the hostile values it accepts)
TARGETS = [
    ("scaling_model --bandwidth", "busbw_GBs", scaling_bandwidth("results.0.busbw_GBs"), ()),
    ("scaling_model --bandwidth", "ranks", scaling_bandwidth("ranks"), ()),
    ("scaling_model --one", "median_step_ms", scaling_one("summary", "median_step_ms", "--one"), ()),
    ("scaling_model --one", "optimizer_ms", scaling_one("summary", "optimizer_ms", "--one"), ("zero",)),
    ("scaling_model --one", "width", scaling_one("config", "width", "--one"), ()),
    ("scaling_model --one", "layers", scaling_one("config", "layers", "--one"), ()),
    ("scaling_model --one", "vocab", scaling_one("config", "vocab", "--one"), ()),
    ("scaling_model --one", "hidden", scaling_one("config", "hidden", "--one"), ()),
    ("scaling_model --one", "world_size", scaling_one("config", "world_size", "--one"), ("missing",)),
    ("scaling_model --check", "median_step_ms", scaling_one("summary", "median_step_ms", "--check"), ()),
    ("scaling_model --check", "world_size", scaling_one("config", "world_size", "--check"), ("missing",)),
    ("full_run_logs table", "train_time_ms", full_run("3.train_time_ms"), ()),
    ("full_run_logs table", "val_loss", full_run("3.val_loss"), ("zero",)),
    ("full_run_logs table", "peak_memory_mib", full_run("4.peak_memory_mib"), ("zero",)),
    ("full_run_logs table", "startup_s", full_run("1.startup_s"), ("zero",)),
    ("full_run_logs table", "step", full_run("2.step"), ("zero",)),  # (a validation at step 0 is before the clock)
    ("mask_pairs", "fwd_tflops", mask_pairs("fwd_tflops"), ("zero", "NaN")),  # (NaN: the bench's failed measurement, named)
    ("mask_pairs", "T", mask_pairs("T"), ()),
    ("mask_pairs", "H", mask_pairs("H"), ()),
    ("ab_report campaign.json", "seed0", campaign("seed0", "ab_report"), ("zero", "missing")),  # (0: a seed)
    ("ab_report campaign.json", "seeds[0]", campaign("plan.seeds.0", "ab_report"), ("zero",)),
    ("ab_report campaign.json", "gpus[0]", campaign("plan.gpus.0", "ab_report"), ()),
    ("ab_run campaign.json", "seed0", campaign("seed0", "ab_run"), ()),
    ("ab_run campaign.json", "runs", campaign("runs", "ab_run"), ("missing",)),
]

summary = []
for k, (tool, fld, make, accepted) in enumerate(TARGETS):
    for label, raw in [("valid", VALID)] + HOSTILE:  # the template itself first: accepted

        name = f"case{len(summary)}"  # (a name that holds no field's name, so that naming the field is the message's)
        cmd, p = make(raw, name)
        rc, out, err, el = run(cmd)
        if label in accepted or raw is VALID:
            problems = outcome_problems(rc, out + err, (0,), [], LIMIT_S)
        else:
            # JSON nested past the parser's depth is refused by the parser, before any field is read: its
            # refusal names the file and the nesting
            names = [os.path.basename(p), "nested"] if label.startswith("nested 100000") else [os.path.basename(p), fld]
            problems = outcome_problems(rc, err, (1, 2), names, LIMIT_S, names_what="the refusal")
            lines = [ln for ln in err.splitlines() if ln.strip()]
            if len(lines) != 1:
                problems.append(f"{len(lines)} lines on standard error, want one")
        first = (err or out).strip().split("\n")[0]
        summary.append(f"{tool} {fld} = {label}: exit {rc} in {el:.1f} s: {first[:160]}")
        check(f"{tool}: {fld} {label} -> exit {rc}" + (f" ({'; '.join(problems)})" if problems else ""), not problems,
              f"$ {shlex.join(str(c) for c in cmd)}\n{(out + err)[-800:]}")

print("\nWhat was tried and how it ended:")
for line in summary:
    print("  " + line)
shutil.rmtree(T, ignore_errors=True)
finish("hostile-numbers")
