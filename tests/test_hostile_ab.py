"""Hostile and careless input against the A/B tools (scripts/ab_run.py, ab_report.py, ab_stats.py,
speedrun_logs.py, ablations/mask_pairs.py) and against every Python tool on a python3 without
its modules. Each case must end with the exit code it names, within a bounded time, with a
message that names the file, flag or module at fault, no traceback, and nothing already written
lost or changed; a report that is written must say what the logs hold (checked line by line).
Prints one line per case, so the list of what was tried is the test's output.

    python3 tests/test_hostile_ab.py

Needs numpy, scipy and statsmodels (the report's); matplotlib for the plot checks. The cases of
a python3 without them run in any case (the modules are hidden from the tools by a folder of
stand-ins on PYTHONPATH).
"""
import hashlib
import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from harness import check, digest_tree, finish, outcome_problems  # noqa: E402
from shard_format import header_bytes  # noqa: E402
from tool_errors import _missing  # noqa: E402

PY = sys.executable
S = os.path.join(ROOT, "scripts")
REPORT = [PY, os.path.join(S, "ab_report.py")]
RUN = [PY, os.path.join(S, "ab_run.py")]
LOGS = [PY, os.path.join(S, "speedrun_logs.py")]
PAIRS = [PY, os.path.join(ROOT, "ablations", "mask_pairs.py")]
FAKE = f"{shlex.quote(PY)} {shlex.quote(os.path.join(HERE, 'fake_trainer.py'))}"
T = tempfile.mkdtemp(prefix="hostile_ab_")
LIMIT_S = 60  # a case still running after this has hung
summary = []


def path(*p):
    return os.path.join(T, *p)


def case(name, cmd, want_rc, names, keep=(), env=None, limit=LIMIT_S, absent=()):
    """Runs cmd; passes when it exits with want_rc in time, its output names every string of
    `names` and none of `absent`, holds no traceback, and the files in `keep` are unchanged."""
    before = digest_tree(keep) if keep else None
    t0 = time.time()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=limit, env=env, cwd=ROOT)
        rc, out, err = r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        rc, out, err = "hung", (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace")
    el = time.time() - t0
    wants = want_rc if isinstance(want_rc, tuple) else (want_rc,)
    problems = outcome_problems(rc, out + err, wants, names, limit, absent)
    if keep and digest_tree(keep) != before:
        problems.append("files already written were changed")
    first = next((ln for ln in err.splitlines() if "error" in ln.lower()), (err or out).strip().split("\n")[0])
    summary.append(f"{name}: exit {rc} in {el:.1f} s: {first.strip()[:170]}")
    check(f"{name} -> exit {rc}" + (f" ({'; '.join(problems)})" if problems else ""), not problems,
          f"$ {shlex.join(str(c) for c in cmd)}\n{(out + err)[-1500:]}")
    return rc, out, err


# ------------------------------------------------------------------------------------ logs
def make_log(p, seed, mask="uni", causal=1, gpus=1, steps=20, run_id="auto", val_tokens=65536, commit="abc1234",
             skip_step=None, stop_at=None, nan_final=False, step_ms=None, jsonl=True, text_run_id=True, loss_shift=0.0,
             val_every=10, train_data="data/gcide/gcide_train_*.bin"):
    """A log and its JSON lines as train_gpt writes them: the run id, the configuration, every
    step's train_loss and time, a validation every val_every steps and at the last. Losses depend
    on the seed, and on the mask only with causal off (with causal on the two masks are one)."""
    rid = hashlib.sha256(f"{p} {seed} {time.time_ns()}".encode()).hexdigest()[:16] if run_id == "auto" else run_id
    step_ms = 100.0 + (seed % 7) if step_ms is None else step_ms
    shift = loss_shift + (0.0 if causal else (0.01 if mask == "bi" else 0.0))
    cfg = {"event": "config", "preset": "default", "train_data": train_data,
           "val_data": "data/gcide/gcide_val_*.bin", "layers": 4, "steps": steps, "val_every": val_every,
           "val_tokens": val_tokens, "window_mask": mask, "causal": causal, "seed": seed, "world_size": gpus,
           "gpu": "NVIDIA H200", "git_commit": commit}
    if rid:
        cfg = {"event": "config", "run_id": rid, **{k: v for k, v in cfg.items() if k != "event"}}
    text, js = [], [json.dumps(cfg)]
    if rid and text_run_id:
        text.append(f"run_id:{rid} train_gpt {commit}")
    text.append(f"train_gpt: NVIDIA H200 x {gpus}, {steps} steps")
    last = steps if stop_at is None else stop_at
    t = 0.0
    for s in range(0, last + 1):
        if s > 0:
            t = (s - 10) * step_ms + 0.123 * (s % 3) if s > 10 else 0.0
            loss = 6.0 / (1 + s) + 0.001 * seed + shift + 1e-7 * s
            avg = t / (s - 10) if s > 10 else math.nan
            if s != skip_step:
                text.append(f"step:{s}/{steps} train_loss:{loss:.4f} train_time:{t:.0f}ms step_avg:{avg:.2f}ms")
                js.append(json.dumps({"event": "step", "step": s, "total_steps": steps, "train_time_ms": round(t, 3),
                                      "train_loss": loss}))
        if s % val_every == 0 or s == steps:
            v = 5.0 / (1 + s) + 0.001 * seed + shift
            if nan_final and s == steps:
                v = math.nan
            avg = t / (s - 10) if s > 10 else math.nan
            text.append(f"step:{s}/{steps} val_loss:{'diverged(nan)' if math.isnan(v) else f'{v:.4f}'} train_time:{t:.0f}ms "
                        f"step_avg:{avg:.2f}ms")  # (train_gpt writes a loss that is not finite as diverged, in both files)
            js.append(json.dumps({"event": "val", "step": s, "total_steps": steps, "train_time_ms": round(t, 3),
                                  "val_loss": "diverged(nan)" if math.isnan(v) else v}))
    with open(p, "w") as f:
        f.write("\n".join(text) + "\n")
    if jsonl:
        with open(os.path.splitext(p)[0] + ".jsonl", "w") as f:
            f.write("\n".join(js) + "\n")
    return rid


def campaign(d, seeds=(1000, 1001, 1002), gpus=(1,), variants=(("uni", "--window-mask uni"), ("bi", "--window-mask bi")),
             record=True, **kw):
    """A campaign folder as scripts/ab_run.py leaves it: VARIANT_gN_rI.txt logs and campaign.json."""
    os.makedirs(d, exist_ok=True)
    for g in gpus:
        for i, seed in enumerate(seeds):
            for name, flags in variants:
                make_log(os.path.join(d, f"{name}_g{g}_r{i}.txt"), seed, mask=flags.split()[-1], gpus=g, **kw)
    if record:
        json.dump({"variants": [list(v) for v in variants], "gpus": list(gpus), "runs": len(seeds), "seed0": seeds[0],
                   "common": ["--steps", str(kw.get("steps", 20)), "--causal", str(kw.get("causal", 1))],
                   "trainer": "./train_gpt", "mpirun_args": ""}, open(os.path.join(d, "campaign.json"), "w"))
    return d


def report(name, args, want_rc, names=(), contains=(), lacks=(), keep=(), limit=LIMIT_S):
    """ab_report with args and --out OUT; on success, report.md must hold every string of
    `contains` and none of `lacks`; on refusal nothing may be written."""
    out = path("rep_" + hashlib.sha1(name.encode()).hexdigest()[:10])
    rc, so, se = case(name, REPORT + args + ["--out", out], want_rc, names, keep=keep, limit=limit)
    rep = open(os.path.join(out, "report.md")).read() if os.path.exists(os.path.join(out, "report.md")) else ""
    if want_rc == 0:
        missing = [c for c in contains if c not in rep]
        present = [c for c in lacks if c in rep]
        check(f"{name}: the report says {len(contains)} thing(s) and not {len(lacks)}", not missing and not present,
              f"missing {missing}, present {present}\n{rep[:3000]}")
    else:
        check(f"{name}: nothing written", not os.path.exists(out), str(os.listdir(out)) if os.path.isdir(out) else "")
    return rep, se


have_stats = not _missing(["numpy", "scipy", "statsmodels"])
have_plots = not _missing(["matplotlib"])

# ------------------------------------------------------------------------------------ 3. no modules
# a folder of stand-ins that fail to import, put first on PYTHONPATH: the tools see a python3
# without numpy, scipy, statsmodels, matplotlib, regex or PyTorch, as on a pyenv, conda or venv
# python3 that lacks them
HIDE = path("hidden_modules")
for m in ("numpy", "scipy", "statsmodels", "matplotlib", "torch", "regex"):
    os.makedirs(os.path.join(HIDE, m))
    open(os.path.join(HIDE, m, "__init__.py"), "w").write(f"raise ImportError(\"No module named '{m}' (hidden by the test)\")\n")


def hidden(*mods):
    d = path("hide_" + "_".join(mods))
    if not os.path.exists(d):
        os.makedirs(d)
        for m in mods:
            shutil.copytree(os.path.join(HIDE, m), os.path.join(d, m))
    return dict(os.environ, PYTHONPATH=d)


tiny_log = path("tiny.txt")
make_log(tiny_log, 1000)
for name, cmd, mods, named in [
    ("ab_report", REPORT + ["--logs-dir", T, "--out", path("r_nomod")], ("numpy",), "numpy"),
    ("ab_report without scipy", REPORT + ["--logs-dir", T, "--out", path("r_nomod")], ("scipy",), "scipy"),
    ("ab_report without statsmodels", REPORT + ["--logs-dir", T, "--out", path("r_nomod")], ("statsmodels",), "statsmodels"),
    ("mask_pairs", PAIRS + [tiny_log], ("scipy",), "scipy"),
    ("synthetic_shards", [PY, os.path.join(S, "synthetic_shards.py"), path("synth_nomod")], ("numpy",), "numpy"),
    ("rank_balance", [PY, os.path.join(S, "rank_balance.py"), path("none_*.bin")], ("numpy",), "numpy"),
    ("torch_peer", [PY, os.path.join(ROOT, "peer", "torch_peer.py"), "--steps", "1"], ("numpy",), "numpy"),
    ("flex_uni_bi", [PY, os.path.join(ROOT, "ablations", "flex_uni_bi.py")], ("numpy",), "numpy"),
    # (it checks its flags before PyTorch; where numpy is missing too, numpy is named first)
    ("flex_uni_bi without PyTorch", [PY, os.path.join(ROOT, "ablations", "flex_uni_bi.py")], ("torch",),
     "numpy" if _missing(["numpy"]) else "PyTorch"),
    ("compare_flex without PyTorch", [PY, os.path.join(ROOT, "bench", "compare_flex.py"), tiny_log], ("torch",), "PyTorch"),
    ("gen_unicode_tables without regex", [PY, os.path.join(S, "gen_unicode_tables.py")], ("regex",), "regex"),
]:
    rc, out, err = case(f"{name} on a python3 without {', '.join(mods)}: one line naming it, exit 1", cmd, 1, [named],
                        env=hidden(*mods))
    check(f"{name} without {', '.join(mods)}: the message is one line and says how to get it",
          len([ln for ln in err.splitlines() if ln.strip()]) == 1 and ("install" in err or "PyTorch" in err), err)
check("synthetic_shards without numpy: no folder written", not os.path.exists(path("synth_nomod")))
for test, mods, suite in [("test_ablation_tools.py", ("scipy",), "ablation-tools"), ("test_torch_peer.py", ("numpy",), "torch-peer"),
                          ("test_cli.py", ("regex",), "cli"), ("test_tokenizer.py", ("regex",), "tokenizer"),
                          ("test_attn_run.py", ("numpy",), "attn-run"), ("torch_model_check.py", ("torch",), "torch-model"),
                          ("test_rank_balance.py", ("numpy",), "rank-balance"),
                          ("test_torch_peer_gpu.py", ("torch",), "torch-peer-gpu")]:
    case(f"tests/{test} on a python3 without {', '.join(mods)}: says so and counts as failed", [PY, os.path.join(HERE, test)],
         1, [mods[0], f"{suite}: 0 passed, 1 failed"], env=hidden(*mods))
# the tools that need nothing beyond the standard library work there
case("speedrun_logs on a python3 without numpy, scipy, statsmodels: works", LOGS + [tiny_log], 0, ["step"],
     env=hidden("numpy", "scipy", "statsmodels", "matplotlib"))
case("ab_run --dry-run on a python3 without numpy, scipy, statsmodels: works",
     RUN + ["--campaign", path("c_nomod"), "--dry-run", "--variant", "a=", "--trainer", FAKE], 0, ["5 to run"],
     env=hidden("numpy", "scipy", "statsmodels", "matplotlib"))
if have_stats:
    case("ab_report without matplotlib: the report without plots, and why", REPORT + ["--group", f"a@1={tiny_log}", "--out",
         path("r_noplot")], 0, ["matplotlib", "apt-get install python3-matplotlib"], env=hidden("matplotlib"))

if not have_stats:
    print(f"the cases below need numpy, scipy and statsmodels, which {PY} lacks: run with /usr/bin/python3 "
          "(scripts/setup.sh provisions it)")
    check("numpy, scipy and statsmodels present for the report's cases", False, PY)
    shutil.rmtree(T, ignore_errors=True)
    finish("hostile-ab")

# ------------------------------------------------------------------------------------ 1. a run is what its logs say
SEEDS = (1000, 1001, 1002)
base = campaign(path("base"), SEEDS)
report("a good campaign: accepted, seeds and run ids named, paired by seed", ["--logs-dir", base], 0,
       contains=["| uni | 1 | 3 | 1000-1002 |", "| bi | 1 | 3 | 1000-1002 |", "The variants differ in: window_mask (uni: uni, bi: bi)",
                 "| 1 | bi | uni | 3 (1000-1002) |", "| 1 | uni vs bi | 1000 |", "checked against the campaign's record"],
       lacks=["| no |"])

d = campaign(path("hole"), SEEDS)
make_log(os.path.join(d, "bi_g1_r1.txt"), 1001, mask="bi", skip_step=17)
report("a log missing train line 17 though its last validation is at the last step: refused", ["--logs-dir", d], 1,
       ["bi_g1_r1.txt", "step 17 of 20 is missing"])
d = campaign(path("stopped"), SEEDS)
make_log(os.path.join(d, "uni_g1_r2.txt"), 1002, stop_at=13)
report("a log stopped at step 13 of 20: refused", ["--logs-dir", d], 1, ["uni_g1_r2.txt", "stopped at step 13 of 20"])
d = campaign(path("noval"), SEEDS)
text = open(os.path.join(d, "uni_g1_r0.txt")).read().splitlines()
open(os.path.join(d, "uni_g1_r0.txt"), "w").write("\n".join(l for l in text if not l.startswith("step:20/20 val_loss")) + "\n")
js = [l for l in open(os.path.join(d, "uni_g1_r0.jsonl")).read().splitlines() if not ('"val"' in l and '"step": 20,' in l)]
open(os.path.join(d, "uni_g1_r0.jsonl"), "w").write("\n".join(js) + "\n")
report("a log without its final validation: refused", ["--logs-dir", d], 1, ["uni_g1_r0.txt", "no validation at its last step"])
d = campaign(path("resumed"), SEEDS)
text = [l for l in open(os.path.join(d, "bi_g1_r0.txt")).read().splitlines() if not any(l.startswith(f"step:{s}/") for s in range(1, 6))]
open(os.path.join(d, "bi_g1_r0.txt"), "w").write("\n".join(text) + "\n")
js = [l for l in open(os.path.join(d, "bi_g1_r0.jsonl")).read().splitlines() if not any(f'"step": {s},' in l for s in range(1, 6))]
open(os.path.join(d, "bi_g1_r0.jsonl"), "w").write("\n".join(js) + "\n")
report("a log that begins at step 6 (a resumed run's): refused", ["--logs-dir", d], 1, ["bi_g1_r0.txt", "begins at step 6"])

# names play no part: r0 and r00, and runs redone under other indices, are paired by their seeds
d = campaign(path("names"), SEEDS)
os.replace(os.path.join(d, "bi_g1_r1.txt"), os.path.join(d, "bi_g1_r7.txt"))
os.replace(os.path.join(d, "bi_g1_r1.jsonl"), os.path.join(d, "bi_g1_r7.jsonl"))
os.replace(os.path.join(d, "bi_g1_r2.txt"), os.path.join(d, "bi_g1_r1.txt"))
os.replace(os.path.join(d, "bi_g1_r2.jsonl"), os.path.join(d, "bi_g1_r1.jsonl"))
make_log(os.path.join(d, "uni_g1_r00.txt"), 1003)
make_log(os.path.join(d, "bi_g1_r03.txt"), 1003, mask="bi")
report("runs redone under other indices (r1 holds seed 1002, r7 seed 1001) and r0 beside r00: paired by seed, identical under "
       "causal", ["--logs-dir", d], 0,
       contains=["| 1 | bi | uni | 4 (1000-1003) |", "| 1 | uni vs bi | 1001 |", "| 1 | uni vs bi | 1003 |", "| uni | 1 | 4 | 1000-1003 |"],
       lacks=["| no |"])

d = campaign(path("foreign_jsonl"), SEEDS)
make_log(path("elsewhere.txt"), 1001, mask="bi")
shutil.copy(path("elsewhere.jsonl"), os.path.join(d, "bi_g1_r1.jsonl"))
report("a .jsonl of another run beside a log (another run id): refused naming it", ["--logs-dir", d], 1,
       ["bi_g1_r1.jsonl", "is not the run of"])
d = campaign(path("foreign_jsonl2"), SEEDS, run_id="")
make_log(path("elsewhere2.txt"), 1001, mask="bi", run_id="", loss_shift=0.002)
shutil.copy(path("elsewhere2.jsonl"), os.path.join(d, "bi_g1_r1.jsonl"))
report("a .jsonl of another run beside a log, neither naming a run id (an older trainer's): refused by its losses",
       ["--logs-dir", d], 1, ["bi_g1_r1.jsonl", "not one run's"])
d = campaign(path("no_text_id"), SEEDS)
make_log(os.path.join(d, "uni_g1_r1.txt"), 1001, text_run_id=False)
report("a log without its run_id line beside JSON lines that name one: refused", ["--logs-dir", d], 1,
       ["uni_g1_r1.jsonl", "names none"])

d = campaign(path("copy"), SEEDS)
shutil.copy(os.path.join(d, "uni_g1_r0.txt"), os.path.join(d, "uni_g1_r5.txt"))
shutil.copy(os.path.join(d, "uni_g1_r0.jsonl"), os.path.join(d, "uni_g1_r5.jsonl"))
report("a run copied under another name (one run id, two files): refused", ["--logs-dir", d], 1,
       ["uni_g1_r5.txt", "uni_g1_r0.txt", "are one run"])
d = campaign(path("copy_bare"), SEEDS, run_id="")
shutil.copy(os.path.join(d, "bi_g1_r2.txt"), os.path.join(d, "bi_g1_r9.txt"))
shutil.copy(os.path.join(d, "bi_g1_r2.jsonl"), os.path.join(d, "bi_g1_r9.jsonl"))
report("a copy of a log without run ids: refused as the same log", ["--logs-dir", d], 1, ["bi_g1_r9.txt", "same log"])
d = campaign(path("copy_across"), SEEDS)
shutil.copy(os.path.join(d, "uni_g1_r0.txt"), os.path.join(d, "bi_g1_r9.txt"))
shutil.copy(os.path.join(d, "uni_g1_r0.jsonl"), os.path.join(d, "bi_g1_r9.jsonl"))
report("a uni run copied in as a bi run: refused (one run id twice)", ["--logs-dir", d], 1, ["bi_g1_r9.txt", "are one run"])
d = campaign(path("seed_twice"), SEEDS)
make_log(os.path.join(d, "uni_g1_r3.txt"), 1001)
report("a seed run twice in one group (a run redone, both kept): refused", ["--logs-dir", d], 1,
       ["uni_g1_r3.txt", "seed 1001 twice"])

d = campaign(path("other_steps"), SEEDS)
make_log(os.path.join(d, "bi_g1_r3.txt"), 1003, mask="bi", steps=30)
report("a complete log of another campaign with other steps copied in: refused", ["--logs-dir", d], 1,
       ["bi_g1_r3.txt", "steps 30"])
d = campaign(path("other_val_tokens"), SEEDS)
make_log(os.path.join(d, "uni_g1_r3.txt"), 1003, val_tokens=131072)
report("a log of other validation tokens in a group: refused", ["--logs-dir", d], 1, ["uni_g1_r3.txt", "val_tokens 131072"])
d = campaign(path("other_commit"), SEEDS)
make_log(os.path.join(d, "uni_g1_r3.txt"), 1003, commit="fff9999")
make_log(os.path.join(d, "bi_g1_r3.txt"), 1003, mask="bi", commit="fff9999")
report("runs of another commit in each group: refused", ["--logs-dir", d], 1, ["git_commit fff9999", "--allow-differ"])
report("runs of another commit, --allow-differ git_commit: accepted and said", ["--logs-dir", d, "--allow-differ", "git_commit"], 0,
       contains=["Allowed to differ (--allow-differ): git_commit", "| 1 | bi | uni | 4 (1000-1003) |"])
d = campaign(path("gpus_name"), SEEDS)
make_log(os.path.join(d, "bi_g1_r1.txt"), 1001, mask="bi", gpus=2)
report("a 2-GPU run named _g1_: refused", ["--logs-dir", d], 1, ["bi_g1_r1.txt", "ran on 2 GPU(s)"])
d = campaign(path("wrong_variant"), SEEDS)
make_log(os.path.join(d, "uni_g1_r1.txt"), 1001, mask="bi")
report("a bi run named as uni: refused (its configuration against its group and campaign.json)", ["--logs-dir", d], 1,
       ["uni_g1_r1.txt", "window_mask"])
d = campaign(path("whole_group_foreign"), SEEDS)
for i, seed in enumerate(SEEDS):
    make_log(os.path.join(d, f"bi_g1_r{i}.txt"), seed, mask="bi", val_tokens=131072)
report("a whole variant from a campaign of other validation tokens: refused (not one of the variants' flags)",
       ["--logs-dir", d], 1, ["val_tokens differs between the variants", "campaign.json"])
report("the same as --group, without a campaign record: the difference is named in the report",
       ["--group", f"uni@1={d}/uni_g1_r*.txt", "--group", f"bi@1={d}/bi_g1_r*.txt"], 0,
       contains=["The variants differ in: val_tokens (uni: 65536, bi: 131072); window_mask (uni: uni, bi: bi)"])
d = campaign(path("bare_in_group"), SEEDS)
os.remove(os.path.join(d, "uni_g1_r1.jsonl"))
report("a log without JSON lines among logs with them: refused", ["--logs-dir", d], 1, ["uni_g1_r1.txt", "no configuration"])
d = campaign(path("variant_gpu_counts"), SEEDS, gpus=(1, 2))
for i, seed in enumerate(SEEDS):
    make_log(os.path.join(d, f"uni_g2_r{i}.txt"), seed, gpus=2, steps=30)
report("one variant with other steps on 2 GPUs: refused (a variant is one configuration)", ["--logs-dir", d], 1,
       ["variant uni", "on 2"])
d = campaign(path("not_in_record"), SEEDS)
make_log(os.path.join(d, "tri_g1_r0.txt"), 1000, mask="uni")
report("a variant that campaign.json does not list: refused", ["--logs-dir", d], 1, ["tri_g1_r0.txt", "not in campaign.json"])
d = campaign(path("g0"), SEEDS)
make_log(os.path.join(d, "uni_g0_r0.txt"), 1000)
report("a log named _g0_: refused", ["--logs-dir", d], 1, ["uni_g0_r0.txt", "GPU count of 0"])
d = campaign(path("keep_old"), SEEDS)
out_keep = path("keep_out")
os.makedirs(out_keep)
open(os.path.join(out_keep, "report.md"), "w").write("the earlier report\n")
open(os.path.join(out_keep, "step_times.png"), "wb").write(b"earlier plot")
make_log(os.path.join(d, "uni_g1_r1.txt"), 1001, stop_at=15)
case("a refused report leaves the earlier report in --out untouched", REPORT + ["--logs-dir", d, "--out", out_keep], 1,
     ["uni_g1_r1.txt"], keep=[out_keep])
make_log(os.path.join(d, "uni_g1_r1.txt"), 1001)
case("the same report accepted once the log is whole, --loss-only: the earlier plot of times is not left beside it",
     REPORT + ["--logs-dir", d, "--out", out_keep, "--loss-only"], 0, [])
check("--loss-only over an earlier report: report.md new, step_times.png gone, no temporary folder left",
      open(os.path.join(out_keep, "report.md")).read().startswith("# Ablation report") and
      not os.path.exists(os.path.join(out_keep, "step_times.png")) and
      not [n for n in os.listdir(out_keep) if n.startswith(".")], str(os.listdir(out_keep)))
# every problem at once, one line each
d = campaign(path("many"), SEEDS)
make_log(os.path.join(d, "uni_g1_r1.txt"), 1001, stop_at=12)
make_log(os.path.join(d, "bi_g1_r2.txt"), 1002, mask="bi", skip_step=3)
rep, err = report("two bad logs: both named, one line each", ["--logs-dir", d], 1, ["uni_g1_r1.txt", "bi_g1_r2.txt", "2 problems"])
check("two bad logs: two error lines", len([l for l in err.splitlines() if "error" in l]) == 2, err)
# the record's own logs: no configuration, so no seeds and no pairing, but their steps are checked
REC = os.path.join(HERE, "fixtures", "record_logs")
report("the record's logs (no configuration): accepted, not paired, the differing step count named",
       ["--group", f"r1124@8={REC}/2024-11-24_*.txt", "--group", f"r1210@8={REC}/2024-12-10_*.txt"], 0,
       contains=["0 (no seeds recorded)", "The variants differ in: steps (r1124: 1750, r1210: 1480)", "none recorded"])
report("one record log given twice under two groups: refused (the same log)",
       ["--group", f"a@8={REC}/2024-11-24_WindowWarmup_3151f69a-f89e-452c-ac80-b85118007583.txt",
        "--group", f"b@8={REC}/2024-11-24_WindowWarmup_3151f69a-f89e-452c-ac80-b85118007583.txt"], 1, ["same log"])
# the committed campaigns still pass every check
committed = sorted(os.path.dirname(p) for p in subprocess.run(["git", "ls-files", "*campaign.json"], cwd=ROOT, capture_output=True,
                                                              text=True).stdout.split())
check("committed campaigns found", len(committed) >= 2, str(committed))
for c in committed:
    report(f"the committed campaign {os.path.relpath(c, ROOT)}: accepted", ["--logs-dir", os.path.join(ROOT, c)], 0,
           contains=["What each group holds", "checked against the campaign's record"])

# ------------------------------------------------------------------------------------ the runner resumes only its own runs
CAMP = path("camp")
DATA = path("shards")
os.makedirs(DATA)


def shard(p, n, fill):
    """Writes a shard of n tokens, each `fill` (docs/formats.md), to p; returns its bytes."""
    data = header_bytes(n) + struct.pack(f"<{n}H", *([fill] * n))
    open(p, "wb").write(data)
    return data


SHARD_BYTES = [shard(os.path.join(DATA, f"x_train_00000{k}.bin"), 512 * k, 0) for k in (1, 2)]
RUNB_FLAGS = RUN + ["--campaign", CAMP, "--runs", "3", "--trainer", FAKE, "--variant", "uni=--window-mask uni", "--variant",
                    "bi=--window-mask bi"]
RUNB_COMMON = ["--", "--causal", "1", "--train-data", os.path.join(DATA, "x_train_*.bin")]
RUNB = RUNB_FLAGS + RUNB_COMMON
env_fail = dict(os.environ, FAKE_FAIL_SEED="1001")
case("ab_run: a campaign stopped by a failing run", RUNB, 1, ["uni_g1_r1.txt", "failed"], env=env_fail)
check("ab_run: campaign.json records the data (shard names, sizes and SHA-256)",
      [[f"x_train_00000{k}.bin", len(b), hashlib.sha256(b).hexdigest()] for k, b in enumerate(SHARD_BYTES, 1)]
      in json.load(open(os.path.join(CAMP, "campaign.json"))).get("data", {}).values())
shard(os.path.join(DATA, "x_train_000002.bin"), 1024, 1)  # other tokens, the same size
case("ab_run: resumed after a shard was changed in place at the same size: refused, nothing touched", RUNB, 1,
     ["data", "x_train_000002.bin", "--start-over"], keep=[CAMP])
open(os.path.join(DATA, "x_train_000002.bin"), "wb").write(SHARD_BYTES[1])
shard(os.path.join(DATA, "x_train_000003.bin"), 256, 0)
case("ab_run: resumed after a shard was added under --train-data: refused, nothing touched", RUNB, 1, ["data", "--start-over"],
     keep=[CAMP])
os.remove(os.path.join(DATA, "x_train_000003.bin"))
good_r0 = open(os.path.join(CAMP, "uni_g1_r0.txt")).read()
make_log(os.path.join(CAMP, "uni_g1_r0.txt"), 1005, train_data=os.path.join(DATA, "x_train_*.bin"))
case("ab_run: resumed with a complete log of another seed at r0: refused naming it", RUNB, 1,
     ["uni_g1_r0.txt", "seed 1005", "seed 1000"], keep=[CAMP])
make_log(os.path.join(CAMP, "uni_g1_r0.txt"), 1000, mask="bi", train_data=os.path.join(DATA, "x_train_*.bin"))
case("ab_run: resumed with a bi log at uni's place: refused", RUNB, 1, ["uni_g1_r0.txt", "window_mask"], keep=[CAMP])
os.remove(os.path.join(CAMP, "uni_g1_r0.txt"))
case("ab_run: a missing log is run again", RUNB + [], 1, ["failed"], env=env_fail)  # stops again at seed 1001
env_vt = dict(os.environ, FAKE_VAL_TOKENS="131072")
case("ab_run: resumed with the trainer's default changed (validation tokens): stops at the first new run, naming it", RUNB, 1,
     ["val_tokens", "131072", "--start-over"], env=env_vt)
os.remove(os.path.join(CAMP, "uni_g1_r1.txt"))
os.remove(os.path.join(CAMP, "uni_g1_r1.jsonl"))
env_c = dict(os.environ, FAKE_COMMIT="fff9999")
case("ab_run: resumed with the trainer rebuilt at another commit: stops, naming git_commit", RUNB, 1, ["git_commit", "fff9999"],
     env=env_c)
os.remove(os.path.join(CAMP, "uni_g1_r1.txt"))
os.remove(os.path.join(CAMP, "uni_g1_r1.jsonl"))
case("ab_run: the campaign finished as it began", RUNB, 0, ["ab_run: 6 runs, 2 complete, 4 to run"])
report("the finished campaign's report: accepted, three pairs identical", ["--logs-dir", CAMP], 0,
       contains=["| 1 | bi | uni | 3 (1000-1002) |"], lacks=["| no |"])
# a plan that lists a seed twice (ab_run writes each once: the record was edited) is refused,
# naming the record, rather than read as a plan of fewer runs
good_record = open(os.path.join(CAMP, "campaign.json")).read()
dup = json.loads(good_record)
dup["plan"]["seeds"] = [1000, 1000, 1001, 1002]
json.dump(dup, open(os.path.join(CAMP, "campaign.json"), "w"))
report("ab_report: a campaign.json whose plan lists a seed twice: refused naming the file and the seed", ["--logs-dir", CAMP], 1,
       ["campaign.json: plan: seeds lists 1000 more than once"])
open(os.path.join(CAMP, "campaign.json"), "w").write(good_record)
open(os.path.join(CAMP, "campaign.json"), "w").write("[" * 100000 + "]" * 100000)
case("ab_run: a campaign.json nested 100000 deep: refused naming it", RUNB, 1, ["campaign.json", "nested too deeply"], keep=[CAMP])
case("ab_report: a campaign.json nested 100000 deep: refused naming it", REPORT + ["--logs-dir", CAMP, "--out", path("r_deep")], 1,
     ["campaign.json", "nested too deeply"])
case("ab_run --start-over over a damaged campaign.json: moves it aside and runs anew", RUNB_FLAGS + ["--start-over"] + RUNB_COMMON, 0,
     ["moved", "0 complete, 6 to run"])
# a seed whose runs diverge (train_gpt logs diverged(nan) and stops with exit 1) is a finished run:
# the campaign goes on to its end (exit 0), says which seed diverged, skips those runs on a resume,
# and the report counts them and names their seed
DIV = path("camp_div")
RUN_DIV = RUN + ["--campaign", DIV, "--runs", "3", "--trainer", FAKE, "--variant", "uni=--window-mask uni", "--variant",
                 "bi=--window-mask bi", "--", "--causal", "1", "--train-data", os.path.join(DATA, "x_train_*.bin")]
env_div = dict(os.environ, FAKE_DIVERGE="1001:7:nan")
_, out, _ = case("ab_run: a seed that diverges: the campaign finishes, naming the diverged seed", RUN_DIV, 0,
                 ["2 of 6 runs diverged", "uni on 1 GPU(s), seed 1001 (train_loss diverged(nan) at step 7 of 20)",
                  "bi on 1 GPU(s), seed 1001"], env=env_div)
check("ab_run: every run of the diverging campaign was made (4 complete, 2 diverged)",
      sorted(f for f in os.listdir(DIV) if f.endswith(".txt")) == [f"{v}_g1_r{i}.txt" for v in ("bi", "uni") for i in range(3)] and
      not os.path.exists(os.path.join(DIV, "incomplete")), str(os.listdir(DIV)))
case("ab_run: resumed after the diverging campaign: nothing to run, the diverged runs skipped and named again", RUN_DIV, 0,
     ["6 complete, 0 to run", "skip (diverged)", "2 of 6 runs diverged"], env=env_div)
report("the diverging campaign's report: the diverged runs counted, named with their seed, left out", ["--logs-dir", DIV], 0,
       contains=["uni_g1_r1.txt | diverged (seed 1001: train_loss diverged(nan) at step 7 of 20) |", "| uni | 1 | 3 (2) |"])
# a campaign that would train on its validation data: a shard of the same SHA-256 under a run's
# --train-data and --val-data (the variant's own pattern, else the common one) is refused before
# anything is written, naming both files; the same pattern for both is a flag error
VALD = path("val_shards")
os.makedirs(VALD)
shard(os.path.join(VALD, "x_val_000001.bin"), 512, 0)  # the bytes of x_train_000001.bin
shard(os.path.join(VALD, "x_val_000002.bin"), 512, 2)
TOV = RUN + ["--campaign", path("camp_tov"), "--runs", "1", "--trainer", FAKE]
TRAIN_PAT, VAL_PAT = os.path.join(DATA, "x_train_*.bin"), os.path.join(VALD, "x_val_*.bin")
case("ab_run: a validation shard of the same bytes as a training shard: refused naming both, nothing written",
     TOV + ["--variant", "a=--causal 1", "--", "--train-data", TRAIN_PAT, "--val-data", VAL_PAT], 1,
     ["x_train_000001.bin", "x_val_000001.bin", "--allow-train-on-val"])
case("ab_run: --train-data equal to --val-data: refused as a flag error, nothing written",
     TOV + ["--variant", "a=--causal 1", "--", "--train-data", VAL_PAT, "--val-data", VAL_PAT], 2, ["--train-data", "--val-data"])
case("ab_run: one variant's --val-data a training shard: refused naming the variant and both files",
     TOV + ["--variant", "a=--causal 1", "--variant", f"b=--val-data={os.path.join(DATA, 'x_train_000002.bin')}", "--",
            "--train-data", TRAIN_PAT, "--val-data", os.path.join(VALD, "x_val_000002.bin")], 1,
     ["variant b", "x_train_000002.bin"])
# a validation shard copied in with a header word changed (3 or 255: words train_gpt requires to be 0)
# holds the validation tokens under another file SHA-256: refused as train_gpt refuses it, naming the
# file and the word, with or without --allow-train-on-val, nothing written
for word, value in ((3, 1), (255, -7)):
    REW = path(f"reworded_{word}")
    shutil.copytree(DATA, REW)
    victim = shutil.copy(os.path.join(VALD, "x_val_000001.bin"), os.path.join(REW, "x_train_000009.bin"))
    with open(victim, "r+b") as f:
        f.seek(4 * word)
        f.write(struct.pack("<i", value))
    for extra in ([], ["--allow-train-on-val"]):
        for dry in ([], ["--dry-run"]):
            case(f"ab_run{' --dry-run' if dry else ''}: a validation shard copied into --train-data with header word {word} changed"
                 f"{' (' + extra[0] + ')' if extra else ''}: refused naming it and the word, nothing written",
                 TOV + dry + ["--variant", "a=--causal 1", "--", "--train-data", os.path.join(REW, "x_train_*.bin"), "--val-data", VAL_PAT,
                              *extra], 1, ["x_train_000009.bin", f"header word {word} is {value}"], keep=[REW, VALD])
check("ab_run: the refused campaigns left nothing behind", not os.path.exists(path("camp_tov")))
case("ab_run: --allow-train-on-val among the flags lets it through (dry run)",
     TOV + ["--dry-run", "--variant", "a=--causal 1", "--", "--train-data", TRAIN_PAT, "--val-data", VAL_PAT, "--allow-train-on-val"], 0,
     ["1 to run"])

# a pattern not given is train_gpt's default (relative to the folder the runs start in): the
# same refusals cover it; ab_run's defaults are train_gpt's recipe's (recipes/*.toml, --recipe FILE)
sys.path.insert(0, S)
import ab_run  # noqa: E402
GCIDE = ("data/gcide/gcide_train_*.bin", "data/gcide/gcide_val_*.bin")
FINEWEB = ("data/fineweb10B/fineweb_train_*.bin", "data/fineweb10B/fineweb_val_*.bin")
own_recipe = path("own_recipe.toml")
open(own_recipe, "w").write(open(os.path.join(ROOT, "recipes", "tiny.toml")).read().replace(GCIDE[1], "v/*.bin"))
bad_recipe = path("bad_recipe.toml")
open(bad_recipe, "wb").write(b"[data\n\xff")
for flags, want in [([], GCIDE), (["--preset", "tiny"], GCIDE), (["--preset=speedrun"], FINEWEB), (["--preset", "2024-12-10"], FINEWEB),
                    (["--preset", "speedrun", "--train-data", "t/*.bin"], ("t/*.bin", FINEWEB[1])), (["--recipe", own_recipe], (GCIDE[0], "v/*.bin")),
                    (["--preset", "nope"], (None, None)), (["--preset", "../recipes/tiny"], (None, None)), (["--recipe", bad_recipe], (None, None)),
                    (["--recipe", path("missing.toml")], (None, None))]:
    check(f"ab_run: the data patterns of {flags} are train_gpt's recipe's", ab_run.data_patterns(flags) == want,
          f"{ab_run.data_patterns(flags)} where {want}")
DFL = path("default_data")
os.makedirs(os.path.join(DFL, "data", "gcide"))
shard(os.path.join(DFL, "data", "gcide", "gcide_train_000001.bin"), 512, 3)
shard(os.path.join(DFL, "data", "gcide", "gcide_val_000001.bin"), 512, 4)
TOV_D = RUN + ["--campaign", path("camp_tov_d"), "--runs", "1", "--trainer", FAKE]
for name, flags, rc in [("--train-data the default --val-data", ["--train-data", "data/gcide/gcide_val_*.bin"], 2),
                        ("--val-data the default --train-data", ["--val-data", "data/gcide/gcide_train_*.bin"], 2),
                        ("--preset tiny, --train-data its default --val-data", ["--preset", "tiny", "--train-data=data/gcide/gcide_val_*.bin"], 2),
                        ("--train-data a copy of the default validation shard", ["--train-data", os.path.join(DFL, "copy_*.bin")], 1)]:
    if rc == 1:
        shutil.copy(os.path.join(DFL, "data", "gcide", "gcide_val_000001.bin"), os.path.join(DFL, "copy_000001.bin"))
    for dry in ([], ["--dry-run"]):
        r = subprocess.run(TOV_D + dry + ["--variant", "a=" + shlex.join(flags), "--"], capture_output=True, text=True, cwd=DFL, timeout=LIMIT_S)
        check(f"ab_run{' --dry-run' if dry else ''}: {name}: refused (exit {rc}) naming the data, nothing written",
              r.returncode == rc and "--val-data" in r.stderr and "Traceback" not in r.stderr and not os.path.exists(path("camp_tov_d")),
              f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
r = subprocess.run(TOV_D + ["--dry-run", "--variant", "a=--causal 1", "--"], capture_output=True, text=True, cwd=DFL, timeout=LIMIT_S)
check("ab_run --dry-run: the default patterns of other shards: accepted", r.returncode == 0 and "1 to run" in r.stdout)

# ------------------------------------------------------------------------------------ 2. time bombs
d = path("spread")
os.makedirs(d)
for i, (seed, ms) in enumerate([(1000, 1.0), (1001, 900.0), (1002, 5.0)]):
    make_log(os.path.join(d, f"uni_g1_r{i}.txt"), seed, step_ms=ms)
    make_log(os.path.join(d, f"bi_g1_r{i}.txt"), seed, mask="bi", step_ms=ms * 1.01)
report("a group whose times spread far more than their mean: finishes, 'more than 1000000' runs", ["--logs-dir", d], 0,
       contains=["more than 1000000"], limit=60)
report("--difference 1e-9: finishes, 'more than 1000000' runs", ["--logs-dir", base, "--difference", "1e-9"], 0,
       contains=["more than 1000000"], limit=60)
import ab_stats  # noqa: E402
t0 = time.time()
n = [ab_stats.runs_needed(d_, 1.0) for d_ in (1e-12, 1e-6, 1e-3, 0.002, 0.01, 0.5)]
el = time.time() - t0
# d = 0.01 sd: the normal approximation 2 (1.95996 + 0.84162)^2 / d^2 = 156977 runs a side, the t's within 0.1% of it;
# d = 0.5: 64 (Cohen's table)
check(f"runs_needed for effects down to 1e-12 sd: capped at a million, the rest exact ({el:.2f} s; bound 5 s)",
      n[:4] == [math.inf] * 4 and 156900 < n[4] < 157200 and n[5] == 64 and el < 5, f"{n} {el}")
import speedrun_logs  # noqa: E402
LONG = 1 << 20  # a 1 MB line
for name, line in [("a 1 MB line of word characters after a step prefix", "step:1/2 " + "a" * LONG),
                   ("a 1 MB line of 'a:' pairs", "a:" * (LONG // 2)), ("a 1 MB line of digits after 'peak memory'", "peak memory " + "1" * LONG),
                   ("a 1 MB line of spaces", " " * LONG), ("a 1 MB run_id", "run_id:" + "x" * LONG),
                   ("a 1 MB noise line", "x" * LONG), ("a 60 KB step line of fields", "step:1/2 " + "k:v " * 15000),
                   # under the 64 KiB cap, so that the expressions themselves meet them
                   ("a 60 KB line of word characters after a step prefix", "step:1/2 " + "a" * 60000),
                   ("a 60 KB line of 'a:' pairs", "a:" * 30000), ("a 60 KB line of digits after 'peak memory'",
                                                                   "peak memory " + "1" * 60000),
                   ("a 60 KB step line of digits", "step:" + "1" * 60000), ("a 60 KB run_id", "run_id:" + "x" * 60000)]:
    p = path("long.txt")
    open(p, "w").write("step:0/2 val_loss:5.0 train_time:0ms step_avg:nanms\n" + line + "\n"
                       "step:1/2 train_time:1ms step_avg:nanms\nstep:2/2 train_time:2ms step_avg:nanms\n"
                       "step:2/2 val_loss:4.0 train_time:2ms step_avg:nanms\n")
    t0 = time.time()
    try:
        r = speedrun_logs.parse(p)
        how = "read: complete" if r.complete else "read: " + r.state()[1]
    except speedrun_logs.LogError as e:
        how = f"refused: {e}"
    el = time.time() - t0
    summary.append(f"speedrun_logs.parse, {name}: {how[:120]} in {el:.3f} s")
    check(f"speedrun_logs.parse, {name}: {el:.3f} s (bound 0.5 s; quadratic parsing took minutes)", el < 0.5, how)
open(path("long.txt"), "w").write("step:0/2 val_loss:5.0 train_time:0ms step_avg:nanms\nstep:1/2 " + "a" * LONG + "\n")
case("speedrun_logs on a log with a 1 MB step line: refused naming the line, quickly", LOGS + [path("long.txt")], 1,
     ["long.txt:2", "64 KiB"], limit=10)
open(path("long.txt"), "w").write("step:0/2 val_loss:5.0 train_time:0ms step_avg:nanms\n" + "b" * (8 * LONG) + "\n")
case("speedrun_logs on a log with an 8 MB noise line: read, quickly", LOGS + [path("long.txt")], 0, ["val"], limit=10)
d = campaign(path("deep_jsonl"), SEEDS)
open(os.path.join(d, "bi_g1_r0.jsonl"), "w").write("[" * 100000 + "]" * 100000 + "\n")
report("a .jsonl whose first line nests 100000 deep: refused naming it", ["--logs-dir", d], 1, ["bi_g1_r0.jsonl:1", "nested too deeply"])
open(os.path.join(d, "bi_g1_r0.jsonl"), "w").write('{"event": "config", "x": ' + "[" * 100000 + "]" * 100000 + "}\n")
report("a configuration holding a list nested 100000 deep: refused naming it", ["--logs-dir", d], 1, ["bi_g1_r0.jsonl:1", "nested"])
open(path("deep.json"), "w").write("[" * 100000 + "]" * 100000 + "\n")
case("mask_pairs on a round nested 100000 deep: refused naming it", PAIRS + [path("deep.json")], 1, ["deep.json:1", "nested"])
open(path("long.json"), "w").write('{"case": "' + "x" * LONG + '"}\n')
case("mask_pairs on a 1 MB line: refused naming it, quickly", PAIRS + [path("long.json")], 1, ["long.json:1"], limit=10)

# ------------------------------------------------------------------------------------ 4. flags and readability
case("speedrun_logs --help: the usage, exit 0", LOGS + ["--help"], 0, ["usage"])
case("speedrun_logs --bogus: an unknown flag, exit 2", LOGS + ["--bogus"], 2, ["--bogus"])
case("speedrun_logs -- --help: a log named --help, exit 1", LOGS + ["--", "--help"], 1, ["--help", "no such log"])
case("speedrun_logs with no log: exit 2", LOGS, 2, ["LOG"])
case("ab_report --group 'x@1=--help': a pattern, matching no file", REPORT + ["--group", "x@1=--help", "--out", path("r_h")], 1,
     ["matches no file"])
case("ab_report --logs-dir --help: wants a folder, exit 2", REPORT + ["--logs-dir", "--help", "--out", path("r_h")], 2, ["--logs-dir"])
for flag in ("nan", "0", "-1", "100", "inf", "abc"):
    case(f"ab_report --difference {flag}: exit 2", REPORT + ["--logs-dir", base, "--out", path("r_d"), "--difference", flag], 2,
         ["--difference"])
case("ab_run --allow-differ without a key: exit 2", RUN + ["--campaign", path("c_x"), "--variant", "a=", "--allow-differ"], 2,
     ["--allow-differ"])
single = path("single")
os.makedirs(single)
make_log(os.path.join(single, "uni_g1_r0.txt"), 1000)
make_log(os.path.join(single, "bi_g1_r0.txt"), 1000, mask="bi")
report("one run a group: the spread is 'n/a (1 run)', never 0.0000", ["--logs-dir", single], 0,
       contains=["| uni | 1 | 1 (1) | 1.2381 | n/a (1 run) | n/a (1 run) |", "n/a (fewer than 2 runs a side)",
                 "n/a (fewer than 2 pairs)", "| 1 | 0 | 6.0000 (1 run) | 6.0000 (1 run) |"], lacks=["+- 0.0000", "nan"])
d = campaign(path("nan"), SEEDS)
make_log(os.path.join(d, "bi_g1_r1.txt"), 1001, mask="bi", nan_final=True)
report("a complete run with a NaN final loss: 'diverged', left out, never 'nan +- nan'", ["--logs-dir", d], 0,
       contains=["diverged (seed 1001: val_loss diverged(nan) at step 20 of 20)", "| bi | 1 | 3 (2) |", "| 1 | bi | uni | 2 (1000, 1002) |"],
       lacks=["nan +- nan", "| nan |"])
pipe = path("pipe_names")
os.makedirs(pipe)
for i, seed in enumerate(SEEDS):
    make_log(os.path.join(pipe, f"a_r{i}.txt"), seed)
    make_log(os.path.join(pipe, f"b_r{i}.txt"), seed, mask="bi")
rep, _ = report("group names with '|' and a newline: escaped, the table intact",
                ["--group", f"a|x@1={pipe}/a_r*.txt", "--group", f"b\nc@1={pipe}/b_r*.txt"], 0,
                contains=["| a\\|x | 1 | 3 (3) |", "| b c | 1 | 3 (3) |"])


def cells(row):
    """The cells of a markdown table row (an escaped '|' is inside a cell)."""
    return row.replace("\\|", "\0").strip().strip("|").split("|")


tables_ok = True
block = []
for line in rep.splitlines() + [""]:
    if line.startswith("|"):
        block.append(line)
    else:
        if block and len({len(cells(r)) for r in block}) != 1:
            tables_ok = False
            print("uneven table:\n" + "\n".join(block))
        block = []
check("every table of that report has as many cells in each row as in its header", tables_ok and "| a\\|x |" in rep)


def png_size(p):
    with open(p, "rb") as f:
        head = f.read(24)
    return struct.unpack(">II", head[16:24]) if head[:8] == b"\x89PNG\r\n\x1a\n" else (0, 0)


if have_plots:
    two = campaign(path("two_counts"), SEEDS, gpus=(1, 2))
    report("two GPU counts: the step-time plot in one panel per count", ["--logs-dir", two], 0, contains=["step_times.png"])
    w2 = png_size(os.path.join(path("rep_" + hashlib.sha1(b"two GPU counts: the step-time plot in one panel per count").hexdigest()[:10]),
                               "step_times.png"))
    w1 = png_size(os.path.join(path("rep_" + hashlib.sha1(b"a good campaign: accepted, seeds and run ids named, paired by seed")
                                    .hexdigest()[:10]), "step_times.png"))
    check(f"the step-time plot grows a panel per GPU count ({w1[0]} px wide for one, {w2[0]} for two; 110 dpi: 550 and 924)",
          w1[0] == 550 and w2[0] == 924, f"{w1} {w2}")

# mask_pairs: a NaN round, one round, '|' in a case name
def bench_case(name, prefix, tf, tfb):
    return json.dumps({"case": name, "T": 4096, "H": 2, "D": 64, "causal": 1, "window": 0, "blocks": 0, "bidir": 0, "docs": 1,
                       "prefix": prefix, "fwd_tflops": tf, "fwdbwd_tflops": tfb}) + "\n"


rounds = []
for k, (a, b) in enumerate([(100.0, 101.0), (float("nan"), 103.0), (104.0, 105.0)]):
    p = path(f"round{k}.json")
    open(p, "w").write(bench_case("prefix | 64", 64, a, 90.0) + bench_case("plain", 0, b, 91.0))
    rounds.append(p)
rc, out, _ = case("mask_pairs with a NaN round: says which, no 'nan +- nan'", PAIRS + rounds, 0, ["n/a (1 of 3 rounds not finite"],
                  absent=["nan +- nan"])
check("mask_pairs: '|' in a case name escaped", "prefix \\| 64" in out, out)
case("mask_pairs with one round: no spread of 0.0", PAIRS + rounds[:1], 0, ["(1 round: no spread)", "n/a (1 round)"],
     absent=["+- 0.0"])
# a round that holds no case (an empty or blank file: an interrupted bench) is named, not taken as a
# round that measured nothing beside the others
open(path("empty_round.json"), "w").close()
open(path("blank_round.json"), "w").write("\n \n")
for name in ("empty_round.json", "blank_round.json"):
    case(f"mask_pairs with a round that is {name.split('_')[0]}: refused naming it", PAIRS + rounds + [path(name)], 1,
         [f"{name}: holds no case"])
open(path("exists.md"), "w").write("keep me\n")
case("mask_pairs --out onto an existing file: refused, untouched", PAIRS + rounds + ["--out", path("exists.md")], 1, ["exists"],
     keep=[path("exists.md")])

# ------------------------------------------------------------------------------------ 5. removal campaigns and recipes
# scripts/ab_run.py --recipe R --remove KEY (scripts/removals.py), with the fake trainer's schema:
# a recipe file of the Python tools is read through one checked path (tool_errors.read_toml):
# a FIFO never opened, a file too deeply nested named, a key given twice refused
RM_RECIPE = path("rm_recipe.toml")
open(RM_RECIPE, "w").write("[model]\nlayers = 4\n[attention]\ndoc_mask = 1\nprefix_tokens = 0\n[run]\nsteps = 20\n"
                           "[optimizer.muon]\nmomentum_start = 0.85\nmomentum_end = 0.95\n"
                           "[schedule]\nlr_cooldown = 600\nwindow_start = 64\nwindow_end = 1792\n")
RM_BARE = path("rm_bare.toml")  # sets no [attention] table: the trainer's defaults stand for it
open(RM_BARE, "w").write("[model]\nlayers = 4\n[run]\nsteps = 20\n")
RM = RUN + ["--trainer", FAKE, "--dry-run", "--campaign", path("rm_never")]


def rm_file(name, body):
    p = path(name)
    open(p, "wb" if isinstance(body, bytes) else "w").write(body)
    return p


_, out, _ = case("ab_run --remove a key whose table the recipe leaves out: the leg's recipe gains the table (dry run)",
                 RM + ["--recipe", RM_BARE, "--remove", "attention.doc_mask"], 0, ["leg no-attention.doc-mask"])
RM_CASES = [
    ("a campaign file nested 5000 deep", ["--removals", rm_file("rm_deep.toml", "[[removal]]\nkeys = " + "[" * 5000 + "]" * 5000 + "\n")],
     2, ["rm_deep.toml", "nested too deeply"]),
    ("a campaign file whose set gives a key twice (quoted and as a table), other values",
     ["--removals", rm_file("rm_twice.toml", "[[removal]]\nset = { 'schedule.window_start' = 128, schedule = { window_start = 256 } }\n")],
     2, ["rm_twice.toml", "schedule.window_start", "twice"]),
    ("a campaign file whose set gives a key twice with one value",
     ["--removals", rm_file("rm_twice2.toml", "[[removal]]\nset = { 'attention.doc_mask' = 0, attention = { doc_mask = 0 } }\n")],
     2, ["rm_twice2.toml", "attention.doc_mask", "twice"]),
    ("a campaign file larger than 1 MiB", ["--removals", rm_file("rm_big.toml", "[[removal]]\nkeys = ['attention.doc_mask']\n" +
                                                                  "#" * (2 << 20) + "\n")], 2, ["rm_big.toml", "larger than"]),
    ("a campaign file of UTF-16", ["--removals", rm_file("rm_u16.toml", "[[removal]]\nkeys = ['attention.doc_mask']\n".encode("utf-16"))],
     2, ["rm_u16.toml", "UTF-8"]),
    ("a campaign file /dev/zero", ["--removals", "/dev/zero"], 2, ["/dev/zero", "not a regular file"]),
    ("a recipe nested 5000 deep", ["--recipe", rm_file("rm_rdeep.toml", "x = " + "[" * 5000 + "]" * 5000 + "\n"), "--remove",
                                   "attention.doc_mask"], 2, ["rm_rdeep.toml", "nested too deeply"]),
]
for name, flags, rc, names in RM_CASES:
    case(f"ab_run --recipe --removals: {name}", RM + (["--recipe", RM_RECIPE] if "--recipe" not in flags else []) + flags, rc, names)
check("ab_run removal refusals: nothing written", not os.path.exists(path("rm_never")))
# a --variant's --recipe is read for its [data] patterns: a FIFO there is named, never opened (which
# would wait for a writer for ever)
os.mkfifo(path("rm_fifo.toml"))
case("ab_run --variant whose --recipe is a FIFO: refused naming it, no hang",
     RUN + ["--trainer", FAKE, "--dry-run", "--campaign", path("rm_never"), "--variant", f"a=--recipe {path('rm_fifo.toml')}",
            "--variant", "b=--steps 3"], (1, 2), ["rm_fifo.toml", "FIFO"], limit=20)
try:
    deep_patterns = ab_run.data_patterns(["--recipe", path("rm_rdeep.toml")])
except RecursionError:
    deep_patterns = "RecursionError"
check("ab_run: the data patterns of a --recipe nested 5000 deep: none (train_gpt refuses it, naming why), no RecursionError",
      deep_patterns == (None, None), str(deep_patterns))
# --target-loss of a loss too small to print in 4 decimals: the verdict says the target as given
camp_t = path("camp_target")
subprocess.run(RUN + ["--trainer", FAKE, "--campaign", camp_t, "--runs", "3", "--variant", "a=--steps 20", "--variant",
                      "b=--steps 20 --doc-mask 0"], capture_output=True, timeout=120, cwd=ROOT)
case("ab_report --target-loss 1e-9: the verdict names the target as given, not 0.0000",
     REPORT + ["--logs-dir", camp_t, "--out", path("rep_t"), "--target-loss", "1e-09"], 0, ["not below 1e-09"], absent=["0.0000)"])

# a FIFO left where ab_run writes its files through a temporary name (campaign.json.tmp, a leg's
# recipe .tmp): the write would wait for a reader for ever; ab_run's own leftover name is replaced
camp_tmp = path("camp_tmp")
RM_RUN = RUN + ["--trainer", FAKE, "--campaign", camp_tmp, "--runs", "1", "--recipe", RM_RECIPE, "--remove", "attention.doc_mask"]
os.makedirs(os.path.join(camp_tmp, "recipes"))
os.mkfifo(os.path.join(camp_tmp, "campaign.json.tmp"))
os.mkfifo(os.path.join(camp_tmp, "recipes", "full.toml.tmp"))
case("ab_run with FIFOs left at its temporary names: the campaign runs", RM_RUN, 0, ["2 runs, 0 complete, 2 to run"], limit=20)
check("ab_run: no temporary name left", not [n for d in (camp_tmp, os.path.join(camp_tmp, "recipes")) for n in os.listdir(d)
                                             if n.endswith(".tmp")], str(os.listdir(camp_tmp)))

# campaign.json read by ab_report (scripts/campaign_record.py): a variant named twice, a plan of a
# variant the record does not have, and JSON whose object gives one key twice (json keeps the last
# without a word; every JSON file and line of the tools is read through tool_errors.load_json)
CR_BASE = json.load(open(os.path.join(camp_t, "campaign.json")))


def campaign_copy(name, text):
    d = path(name)
    shutil.copytree(camp_t, d)
    open(os.path.join(d, "campaign.json"), "w").write(text)
    return d


for name, text, names in (
        ("a variant named twice", json.dumps(dict(CR_BASE, variants=[CR_BASE["variants"][0]] * 2 + CR_BASE["variants"][1:])),
         ["campaign.json", "variants", "twice"]),
        ("a plan of a variant it does not have", json.dumps(dict(CR_BASE, plan=dict(CR_BASE["plan"], variants=["a", "zz"]))),
         ["campaign.json", "plan", "zz"]),
        ("an object giving the key plan twice", json.dumps(CR_BASE)[:-1] + ', "plan": {"variants": ["a"], "gpus": [1], "seeds": [1000]}}',
         ["campaign.json", "plan", "twice"])):
    case(f"ab_report, a campaign.json with {name}: refused naming it", REPORT + ["--logs-dir", campaign_copy("cr_" + name.replace(" ", "_"),
                                                                                                            text),
                                                                              "--out", path("rep_cr")], 1, names)
cr_log = campaign_copy("cr_log_twice", json.dumps(CR_BASE))
lines = open(os.path.join(cr_log, "a_g1_r0.jsonl")).read().splitlines()
lines[0] = lines[0][:-1] + ', "seed": 1001}'
open(os.path.join(cr_log, "a_g1_r0.jsonl"), "w").write("\n".join(lines) + "\n")
case("ab_report, a log whose configuration gives seed twice: refused naming the file and line", REPORT + ["--logs-dir", cr_log, "--out",
                                                                                                          path("rep_cr")], 1,
     ["a_g1_r0.jsonl:1", "seed", "twice"])
check("ab_report: the refused campaign records wrote no report", not os.path.exists(path("rep_cr")))

print("\nWhat was tried and how it ended:")
for line in summary:
    print("  " + line)
shutil.rmtree(T, ignore_errors=True)
finish("hostile-ab")
