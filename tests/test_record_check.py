"""The record check of scripts/ab_report.py (--target-loss) and its marking of variants whose
mask leaks targets. The numbers are checked against scipy on a published record: the 14 runs of
modded-nanogpt's 2025-08-23 record (tests/fixtures/record_check/, from that record's README),
whose README states p = 0.0059; the report must reproduce it to 4 digits, and its times' mean,
confidence interval and Welch p must be scipy's. Then the answers it states instead of a verdict
(one run, no spread, a diverged run, a mean above the target, a leaking mask) and its refusals of
bad --target-loss values.

    python3 tests/test_record_check.py
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)
from tool_errors import require  # noqa: E402
require("numpy", "scipy", "statsmodels", suite="record-check")
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402
import ab_stats as st  # noqa: E402
from harness import check, finish  # noqa: E402

REPORT = [sys.executable, os.path.join(ROOT, "scripts", "ab_report.py")]
FIXTURE = os.path.join(HERE, "fixtures", "record_check", "2025-08-23_SparseAttnGate.txt")
table = np.loadtxt(FIXTURE, comments="#")
LOSSES, TIMES = [float(x) for x in table[:, 0]], [float(x) for x in table[:, 1]]
check("fixture: the record's 14 runs", len(LOSSES) == 14 == len(TIMES), str(table.shape))

# ------------------------------------------------------------------ the statistics, against scipy
p = st.p_below(LOSSES, 3.28)
ref = stats.ttest_1samp(LOSSES, 3.28, alternative="less").pvalue
check("p_below is scipy's one-sided ttest_1samp (to 1e-12)", abs(p - ref) <= 1e-12, f"{p} {ref}")
check("p_below reproduces the record's published p = 0.0059 to 4 digits", f"{p:.4f}" == "0.0059", f"{p}")
check("mean 3.2787 and standard deviation 0.0016 as the README prints them (4 decimals)",
      f"{st.mean(LOSSES):.4f}" == "3.2787" and f"{st.std(LOSSES):.4f}" == "0.0016", f"{st.mean(LOSSES)} {st.std(LOSSES)}")
check("times: mean 168.7527 s and standard deviation 0.4946 as the README prints them (4 decimals)",
      f"{st.mean(TIMES):.4f}" == "168.7527" and f"{st.std(TIMES):.4f}" == "0.4946", f"{st.mean(TIMES)} {st.std(TIMES)}")


def sample(m, sd, n):
    """n values of exactly mean m and sample standard deviation sd (evenly spaced, rescaled)."""
    z = np.linspace(-1.0, 1.0, n)
    return list(m + sd * (z - z.mean()) / z.std(ddof=1))


m, sd = st.mean(LOSSES), st.std(LOSSES)
need = st.runs_to_pass(m, sd, 3.28)
p_at = lambda n: stats.ttest_1samp(sample(m, sd, n), 3.28, alternative="less").pvalue  # noqa: E731
check("the smallest passing n at the record's mean and spread: scipy's p is below 0.01 at n, not at n - 1",
      isinstance(need, int) and p_at(need) < 0.01 <= p_at(need - 1), f"n {need}: {p_at(need)} {p_at(need - 1)}")
check("the smallest passing n is at most the 14 runs that passed", need <= 14, str(need))
check("smallest n: none when the mean is not below the target", st.runs_to_pass(3.281, 0.001, 3.28) == math.inf)
check("smallest n: 2 when the mean lies far below (scipy agrees)",
      st.runs_to_pass(3.0, 0.001, 3.28) == 2 and stats.ttest_1samp(sample(3.0, 0.001, 2), 3.28, alternative="less").pvalue < 0.01)
check("smallest n: nan without a spread", math.isnan(st.runs_to_pass(3.27, 0.0, 3.28)))
check("smallest n: more than a million is math.inf", st.runs_to_pass(3.28 - 1e-9, 1.0, 3.28) == math.inf)


# ------------------------------------------------------------------ the report on logs of these runs
def write_run(path, loss, time_s, config=None, steps=12, diverge=False):
    """A run's log in the record's form (and, with config, train_gpt's JSON lines beside it): a
    validation at step 0 and at the end, whose training time is time_s (its step average counts
    from step 10, as the record's does)."""
    run_id = os.urandom(8).hex() if config is not None else None
    t_end = round(time_s * 1000)
    text, events = [], []
    if run_id:
        text.append(f"run_id:{run_id} train_gpt test")
        events.append(dict(config, event="config", run_id=run_id, steps=steps))
    text.append(f"step:0/{steps} val_loss:10.8258 train_time:0ms step_avg:nanms")
    events.append({"event": "val", "step": 0, "total_steps": steps, "train_time_ms": 0, "val_loss": 10.8258})
    for s in range(1, steps + 1):
        tt = t_end * s // steps
        bad = diverge and s == steps
        avg = f"{tt / (s - 10):.2f}" if s > 10 else "nan"
        text.append(f"step:{s}/{steps} " + ("train_loss:diverged(nan) " if bad else "") + f"train_time:{tt}ms step_avg:{avg}ms")
        events.append(dict({"event": "step", "step": s, "total_steps": steps, "train_time_ms": tt},
                           **({"train_loss": "diverged(nan)"} if bad else {})))
        if bad:
            break
    else:
        text.append(f"step:{steps}/{steps} val_loss:{loss:.4f} train_time:{t_end}ms step_avg:{t_end / (steps - 10):.2f}ms")
        events.append({"event": "val", "step": steps, "total_steps": steps, "train_time_ms": t_end, "val_loss": loss})
    with open(path, "w") as f:
        f.write("\n".join(text) + "\n")
    if config is not None:
        with open(os.path.splitext(path)[0] + ".jsonl", "w") as f:
            f.write("\n".join(json.dumps(e) for e in events) + "\n")


def report(args):
    r = subprocess.run(REPORT + args, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


d = tempfile.mkdtemp(prefix="record_check_")
gate = os.path.join(d, "gate")
os.makedirs(gate)
for i, (loss, t) in enumerate(zip(LOSSES, TIMES)):
    write_run(os.path.join(gate, f"run{i:02d}.txt"), loss, t)
rc, out, err = report(["--group", f"gate@8={gate}/*.txt", "--out", os.path.join(d, "r1"), "--target-loss"])
first = out.splitlines()[0] if out else ""
check("--target-loss alone: 3.28; the first line is the verdict in the record's terms",
      rc == 0 and first.startswith("Record check against 3.28 (one-sided t-test, p < 0.01): mean 3.2787 over 14 runs, "
                                   "p = 0.0059 < 0.01: passes") and f"the smallest n that passes at this mean and spread: {need}" in first,
      first + err[-500:])

# a baseline: the same 14 runs 1.5 s slower a run and 0.002 higher in loss (fails at 3.28)
base = os.path.join(d, "base")
os.makedirs(base)
for i, (loss, t) in enumerate(zip(LOSSES, TIMES)):
    write_run(os.path.join(base, f"run{i:02d}.txt"), loss + 0.002, t + 1.5 + 0.1 * (i % 3))
rc, out, err = report(["--group", f"base@8={base}/*.txt", "--group", f"gate@8={gate}/*.txt", "--out", os.path.join(d, "r2"),
                       "--target-loss", "3.28"])
first = out.splitlines()[0] if out else ""
bl = [x + 0.002 for x in LOSSES]
p_base = stats.ttest_1samp(bl, 3.28, alternative="less").pvalue
check("two groups: each one's verdict in the first line (the baseline fails at its p)",
      rc == 0 and f"base@8: mean {np.mean(bl):.4f} over 14 runs, p = {p_base:.4f} >= 0.01: fails" in first and
      "gate@8: mean 3.2787 over 14 runs, p = 0.0059 < 0.01: passes" in first, first)
row = next((l for l in out.splitlines() if l.startswith("| gate | 8 | 14 |")), "")
cells = [c.strip() for c in row.strip("|").split("|")]
bt = [t + 1.5 + 0.1 * (i % 3) for i, t in enumerate(TIMES)]
lo, hi = stats.t.interval(0.95, 13, loc=np.mean(TIMES), scale=stats.sem(TIMES))
welch = stats.ttest_ind(TIMES, bt, equal_var=False).pvalue
# (times pass through the log in whole milliseconds: the fixture's are whole milliseconds, so
# exact; the 2-decimal and 4-decimal prints are compared as text)
check("the record-check row: train time mean and 95% CI half-width as scipy's t.interval (2 decimals)",
      len(cells) >= 13 and cells[9] == f"{np.mean(TIMES):.2f} +- {(hi - lo) / 2:.2f}", f"{cells} want {np.mean(TIMES):.2f} +- {(hi - lo) / 2:.2f}")
check("the record-check row: Welch's p of the train time against the baseline is scipy's ttest_ind (4 decimals)",
      len(cells) >= 13 and cells[10] == (f"{welch:.4f}" if welch >= 1e-4 else f"{welch:.2g}"), f"{cells} want {welch}")
check("the record-check row: p and the smallest n", len(cells) >= 13 and cells[7] == "0.0059" and cells[8] == str(need), str(cells))

# the answers stated in place of a verdict
one = os.path.join(d, "one")
os.makedirs(one)
write_run(os.path.join(one, "run0.txt"), 3.27, 170.0)
rc, out, err = report(["--group", f"one@8={one}/*.txt", "--out", os.path.join(d, "r3"), "--target-loss"])
check("one run: not judged, said in the first line (no traceback)",
      rc == 0 and "not judged: the one-sided t-test needs 2 runs or more" in (out.splitlines() or [""])[0] and "Traceback" not in err,
      out[:400] + err[-400:])
flat = os.path.join(d, "flat")
os.makedirs(flat)
for i in range(4):
    write_run(os.path.join(flat, f"run{i}.txt"), 3.2700, 170.0 + i)
rc, out, err = report(["--group", f"flat@8={flat}/*.txt", "--out", os.path.join(d, "r4"), "--target-loss"])
check("zero spread: stated as no spread, not judged (no traceback)",
      rc == 0 and "(no spread): not judged" in (out.splitlines() or [""])[0] and "Traceback" not in err, out[:400] + err[-400:])
high = os.path.join(d, "high")
os.makedirs(high)
for i, loss in enumerate([3.2810, 3.2820, 3.2805]):
    write_run(os.path.join(high, f"run{i}.txt"), loss, 170.0)
rc, out, err = report(["--group", f"high@8={high}/*.txt", "--out", os.path.join(d, "r5"), "--target-loss", "3.28"])
check("a mean above the target: fails, and no n passes", rc == 0 and ": fails" in out.splitlines()[0] and
      "none (the mean is not below 3.28)" in out.splitlines()[0], out[:400] + err[-400:])
div = os.path.join(d, "div")
os.makedirs(div)
for i, (loss, t) in enumerate(zip(LOSSES, TIMES)):
    write_run(os.path.join(div, f"run{i:02d}.txt"), loss, t, diverge=i == 5)
rc, out, err = report(["--group", f"div@8={div}/*.txt", "--out", os.path.join(d, "r6"), "--target-loss"])
first = out.splitlines()[0] if out else ""
check("a diverged run: counted (13 of 14), named, and the group fails", rc == 0 and "over 13 of 14 runs" in first and
      "run05.txt" in first and "fails (a record counts every run)" in first, first + err[-300:])

# a mask that leaks targets: marked in the report's first lines, refused by the record check
cfg = {"seed": 0, "world_size": 8, "causal": 0, "window_mask": "bi"}
for name, extra in (("leaky", {"leaks_targets": "yes"}), ("old", {})):
    g = os.path.join(d, name)
    os.makedirs(g)
    for i, (loss, t) in enumerate(zip(LOSSES, TIMES)):
        write_run(os.path.join(g, f"run{i:02d}.txt"), loss, t, config=dict(cfg, seed=i, **extra))
    rc, out, err = report(["--group", f"{name}@8={g}/*.txt", "--out", os.path.join(d, "r7" + name)])
    head = "\n".join(out.splitlines()[:4])
    check(f"{name}: the report names the leak in its first lines, and on stderr", rc == 0 and "**Leaks targets:** " + name + "@8" in head and
          "leaks targets" in err, head + err[-300:])
    rc, out, err = report(["--group", f"{name}@8={g}/*.txt", "--out", os.path.join(d, "r8" + name), "--target-loss"])
    first = out.splitlines()[0] if out else ""
    check(f"{name}: the record check refuses it, whatever its p", rc == 0 and "refused: its mask leaks targets" in first and
          "passes" not in first, first)
ok = os.path.join(d, "ok")
os.makedirs(ok)
for i, (loss, t) in enumerate(zip(LOSSES, TIMES)):
    write_run(os.path.join(ok, f"run{i:02d}.txt"), loss, t, config=dict(cfg, seed=i, causal=1, leaks_targets="no"))
rc, out, err = report(["--group", f"ok@8={ok}/*.txt", "--group", f"leaky@8={d}/leaky/*.txt", "--out", os.path.join(d, "r9"),
                       "--target-loss"])
first = out.splitlines()[0] if out else ""
check("a causal variant beside a leaking one: it passes, the other is refused; the leak is no undeclared difference",
      rc == 0 and "ok@8: mean 3.2787 over 14 runs, p = 0.0059 < 0.01: passes" in first and "leaky@8: mean 3.2787 over 14 runs: refused" in first,
      first + err[-500:])

# a campaign of scripts/ab_run.py with the stand-in trainer (tests/fake_trainer.py, which refuses
# --causal 0 without --allow-target-leak and records leaks_targets as train_gpt does): a causal
# variant against a causal-off one; the two differ in leaks_targets, which follows from their flags
FAKE = f"{sys.executable} {os.path.join(HERE, 'fake_trainer.py')}"
AB_RUN = [sys.executable, os.path.join(ROOT, "scripts", "ab_run.py"), "--runs", "3", "--trainer", FAKE]
camp = os.path.join(d, "camp")
r = subprocess.run(AB_RUN + ["--campaign", camp, "--variant", "c=--causal 1", "--variant", "nc=--causal 0 --allow-target-leak"],
                   capture_output=True, text=True)
check("ab_run: a causal-off variant with --allow-target-leak runs beside a causal one (resumed: one setting)",
      r.returncode == 0 and subprocess.run(AB_RUN + ["--campaign", camp, "--variant", "c=--causal 1", "--variant",
                                                     "nc=--causal 0 --allow-target-leak"], capture_output=True).returncode == 0,
      r.stdout[-500:] + r.stderr[-500:])
rc, out, err = report(["--logs-dir", camp, "--out", os.path.join(d, "rcamp"), "--target-loss", "10"])
first = out.splitlines()[0] if out else ""
check("ab_report of the campaign: leaks_targets no undeclared difference; c judged, nc refused and named in the first lines",
      rc == 0 and "c@1: mean" in first and "nc@1: mean" in first and "refused: its mask leaks" in
      first.split("nc@1:")[1] and "refused" not in first.split("nc@1:")[0] and "**Leaks targets:** nc@1" in "\n".join(out.splitlines()[:6]),
      first + err[-500:])
camp2 = os.path.join(d, "camp2")
r = subprocess.run(AB_RUN + ["--campaign", camp2, "--variant", "c=--causal 1", "--variant", "nc=--causal 0"], capture_output=True,
                   text=True)
check("ab_run: a causal-off variant without --allow-target-leak fails, the trainer's refusal shown",
      r.returncode != 0 and "--allow-target-leak" in r.stdout + r.stderr and "Traceback" not in r.stderr, r.stdout[-500:] + r.stderr[-500:])

# bad --target-loss values: refused with exit 2 naming the flag, nothing written
for value in ("nan", "-3.28", "0", "inf", "abc", "-inf"):
    out_dir = os.path.join(d, "bad" + value)
    rc, out, err = report(["--group", f"gate@8={gate}/*.txt", "--out", out_dir, f"--target-loss={value}"])
    check(f"--target-loss {value}: refused (exit 2), naming the flag, no traceback, nothing written",
          rc == 2 and "--target-loss" in err and "Traceback" not in err and not os.path.exists(out_dir), err[-300:])

finish("record-check")
