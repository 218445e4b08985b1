"""The ablation tools (scripts/): the log parser on the real modded-nanogpt logs shipped in
tests/fixtures/record_logs, the statistics against values worked out by hand and
against printed t tables, report generation on small synthetic logs, and the runner's resume
logic with a fake trainer.

    python3 tests/test_ablation_tools.py [RECORD_LOG_DIR]
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)
from tool_errors import require  # noqa: E402
require("numpy", "scipy", "statsmodels", "matplotlib", suite="ablation-tools")
import ab_stats as st  # noqa: E402
import speedrun_logs  # noqa: E402
from harness import check, finish  # noqa: E402

logs_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "fixtures", "record_logs")

# ------------------------------------------------------------------ parser on the real logs
real = sorted(glob.glob(os.path.join(logs_dir, "2024-12-10_*.txt")))
check("four 2024-12-10 logs present", len(real) == 4, logs_dir)
for p in real:
    r = speedrun_logs.parse(p)
    name = os.path.basename(p)[:30]
    check(f"{name}: 1480 steps", r.total_steps == 1480 and len(r.train) == 1480 and r.train[-1][0] == 1480,
          f"{r.total_steps} {len(r.train)}")
    check(f"{name}: 13 validations (every 125 steps and the end)", len(r.val) == 13 and r.val[0][0] == 0 and r.val[-1][0] == 1480,
          str([v[0] for v in r.val]))
    check(f"{name}: complete", r.complete)
    check(f"{name}: step_avg at the end parses", not math.isnan(r.step_avg_ms) and 150 < r.step_avg_ms < 170, str(r.step_avg_ms))
    check(f"{name}: peak memory", r.peak_memory_mib == 34239 or r.peak_memory_mib > 30000, str(r.peak_memory_mib))
# exact final values of one log, read off the file by eye
r = speedrun_logs.parse(os.path.join(logs_dir, "2024-12-10_MFUTweaks_04df8c70-2462-4b6c-9e49-c7589b321a81.txt"))
check("04df8c70: final val_loss 3.2756", r.final_val_loss == 3.2756, str(r.final_val_loss))
check("04df8c70: final train_time 231368 ms, step_avg 157.39", r.train_time_ms == 231368 and r.step_avg_ms == 157.39,
      f"{r.train_time_ms} {r.step_avg_ms}")
check("04df8c70: val at 125 is 4.4235", r.val[1] == (125, 4.4235, 17298.0), str(r.val[1]))
check("04df8c70: step 0 val_loss 10.8258 with step_avg nan", r.val[0][1] == 10.8258)
check("04df8c70: per-step times skip the first 10 steps", len(r.step_times_ms()) == 1469, str(len(r.step_times_ms())))
# the 2024-11-24 record: train_loss on every step line, 1750 steps
old = sorted(glob.glob(os.path.join(logs_dir, "2024-11-24_*.txt")))
check("four 2024-11-24 logs present", len(old) == 4, logs_dir)
for p in old:
    r = speedrun_logs.parse(p)
    name = os.path.basename(p)[:30]
    check(f"{name}: 1750 steps with train losses", r.total_steps == 1750 and len(r.train) == 1750 and
          all(not math.isnan(t[3]) for t in r.train), f"{r.total_steps} {len(r.train)}")
    check(f"{name}: 15 validations, complete", len(r.val) == 15 and r.complete, str([v[0] for v in r.val]))
# exact values of one log, read off the file by eye
r = speedrun_logs.parse(os.path.join(logs_dir, "2024-11-24_WindowWarmup_3151f69a-f89e-452c-ac80-b85118007583.txt"))
check("3151f69a: final val_loss 3.2745 at 279398 ms", r.val[-1] == (1750, 3.2745, 279398.0), str(r.val[-1]))
check("3151f69a: last train line 3.2751, 279349 ms, step_avg 160.55", r.train[-1] == (1750, 279349.0, 160.55, 3.2751), str(r.train[-1]))
check("3151f69a: step 1 train_loss 10.8258, step_avg nan", r.train[0][3] == 10.8258 and math.isnan(r.train[0][2]), str(r.train[0]))
check("3151f69a: val at 1625 is 3.2955", r.val[-2] == (1625, 3.2955, 258096.0), str(r.val[-2]))

# ------------------------------------------------------------------ one log, one run
def refused(path, name, *needles):
    """speedrun_logs.parse(path) must raise LogError whose message holds every needle."""
    try:
        speedrun_logs.parse(path)
        check(name, False)
    except speedrun_logs.LogError as e:
        check(name, all(n in str(e) for n in needles), str(e))


with tempfile.TemporaryDirectory() as d:
    both = os.path.join(d, "two.txt")
    with open(both, "w") as f:
        f.write(open(real[0]).read() + open(real[1]).read())
    refused(both, "two record logs put together: refused, naming the line", "more than one run", "two.txt:")
    ids = os.path.join(d, "ids.txt")
    with open(ids, "w") as f:
        f.write("run_id:aaaa train_gpt x\nstep:0/2 val_loss:5.0 train_time:0ms step_avg:nanms\n"
                "run_id:bbbb train_gpt x\nstep:1/2 train_time:1ms step_avg:nanms\n")
    refused(ids, "two run ids in one log: refused", "bbbb", "aaaa")
    one = os.path.join(d, "one.txt")
    with open(one, "w") as f:
        f.write("run_id:cccc train_gpt x\nstep:0/1 val_loss:5.0 train_time:0ms step_avg:nanms\n"
                "step:1/1 train_time:1ms step_avg:nanms\nstep:1/1 val_loss:4.0 train_time:1ms step_avg:nanms\n")
    with open(os.path.join(d, "one.jsonl"), "w") as f:
        f.write('{"event": "config", "run_id": "cccc"}\n{"event": "config", "run_id": "dddd"}\n')
    refused(one, "two configurations in the JSON lines: refused", "more than one run")
    one_events = ('{"event": "val", "step": 0, "total_steps": 1, "train_time_ms": 0.0, "val_loss": 5.0}\n'
                  '{"event": "step", "step": 1, "total_steps": 1, "train_time_ms": 1.2, "train_loss": 4.5}\n'
                  '{"event": "val", "step": 1, "total_steps": 1, "train_time_ms": 1.2, "val_loss": 4.00004}\n')
    with open(os.path.join(d, "one.jsonl"), "w") as f:
        f.write('{"event": "config", "run_id": "cccc"}\n' + one_events)
    r = speedrun_logs.parse(one)
    check("one run with its id: parsed, id read", r.run_id == "cccc" and r.complete and r.config.get("run_id") == "cccc")
    check("one run: the losses at full precision from the JSON lines",
          r.loss_sequence() == [(0, "val_loss", 5.0), (1, "train_loss", 4.5), (1, "val_loss", 4.00004)], str(r.loss_sequence()))
    # JSON lines beside the log that are not its run's are refused, never used in its place
    for name, jsonl, needle in [
        ("another run id", '{"event": "config", "run_id": "dddd"}\n' + one_events, "dddd"),
        ("no run id where the log names one", '{"event": "config"}\n' + one_events, "names no run"),
        ("a step the log lacks", '{"event": "config", "run_id": "cccc"}\n' + one_events +
         '{"event": "step", "step": 2, "total_steps": 1, "train_time_ms": 2.0, "train_loss": 4.0}\n', "step 2"),
        ("a loss off by more than the text's rounding (5e-5)", '{"event": "config", "run_id": "cccc"}\n' +
         one_events.replace("4.00004", "4.00006"), "step 1"),
        ("a time off by more than the text's rounding (0.5 ms)", '{"event": "config", "run_id": "cccc"}\n' +
         one_events.replace("1.2,", "1.51,"), "train_time"),
        ("only the configuration", '{"event": "config", "run_id": "cccc"}\n', "not in"),
        ("a configuration of other steps", '{"event": "config", "run_id": "cccc", "steps": 300}\n' + one_events, "300 steps"),
    ]:
        with open(os.path.join(d, "one.jsonl"), "w") as f:
            f.write(jsonl)
        refused(one, f"JSON lines beside the log with {name}: refused", "one.jsonl", needle)
    # step times to the microsecond from the JSON lines, where the text log rounds to whole ms:
    # steps 11, 12, 13 end at 1000.4, 2001.2, 3000.9 ms (printed 1000, 2001, 3001)
    times = os.path.join(d, "times.txt")
    ends = {11: 1000.4, 12: 2001.2, 13: 3000.9}
    with open(times, "w") as f:
        f.write("step:0/13 val_loss:5.0 train_time:0ms step_avg:nanms\n")
        for s in range(1, 14):
            t = ends.get(s, 0.0)
            f.write(f"step:{s}/13 train_time:{t:.0f}ms step_avg:{t / (s - 10) if s > 10 else float('nan'):.2f}ms\n")
        f.write("step:13/13 val_loss:4.0 train_time:3001ms step_avg:1000.30ms\n")
    vals = (json.dumps({"event": "val", "step": 0, "train_time_ms": 0.0, "val_loss": 5.0}) + "\n" +
            json.dumps({"event": "val", "step": 13, "train_time_ms": 3000.9, "val_loss": 4.0}) + "\n")
    with open(os.path.join(d, "times.jsonl"), "w") as f:
        f.write('{"event": "config"}\n' + "".join(json.dumps({"event": "step", "step": s, "train_time_ms": ends.get(s, 0.0)}) + "\n"
                                                for s in range(1, 14)) + vals)
    r = speedrun_logs.parse(times)
    got = [round(x, 6) for x in r.step_times_ms()]
    check("step times from the JSON lines' full precision: 1000.8 and 999.7 ms (the text says 1001 and 1000)",
          r.times_from_json and got == [1000.8, 999.7] and abs(r.step_avg_ms - 3000.9 / 3) < 1e-9, f"{got} {r.step_avg_ms}")
    with open(os.path.join(d, "times.jsonl"), "w") as f:  # times of another run: refused, not silently replaced
        f.write('{"event": "config"}\n' + "".join(json.dumps({"event": "step", "step": s, "train_time_ms": 5 * ends.get(s, 0.0)}) + "\n"
                                                for s in range(1, 14)) + vals)
    refused(times, "JSON times that disagree with the text log: refused", "times.jsonl", "step 11")
    # complete means every step 1..N: a log whose last validation is at the last step but which
    # lacks a training step is not complete (its times would be an earlier step's)
    holes = os.path.join(d, "holes.txt")
    with open(holes, "w") as f:
        f.write("step:0/4 val_loss:5.0 train_time:0ms step_avg:nanms\nstep:1/4 train_time:1ms step_avg:nanms\n"
                "step:2/4 train_time:2ms step_avg:nanms\nstep:4/4 train_time:4ms step_avg:nanms\n"
                "step:4/4 val_loss:4.0 train_time:4ms step_avg:nanms\n")
    r = speedrun_logs.parse(holes)
    check("a log with step 3 of 4 missing is not complete, and says so", not r.complete and "step 3 of 4 is missing" in r.state()[1],
          str(r.state()))
    with open(holes, "w") as f:
        f.write("step:0/4 val_loss:5.0 train_time:0ms step_avg:nanms\nstep:1/4 train_time:1ms step_avg:nanms\n"
                "step:2/4 train_time:2ms step_avg:nanms\n")
    r = speedrun_logs.parse(holes)
    check("a log stopped at step 2 of 4 is not complete", not r.complete and "stopped at step 2 of 4" in r.state()[1], str(r.state()))
    check("a step line without a loss: its loss is None (absent), not a number", [t[3] for t in r.train] == [None, None],
          str(r.train))

    # a loss logged as diverged (train_gpt writes diverged(nan|inf|-inf) in both files, then stops)
    # is told from a missing one: a Diverged of that value, and the run's state says diverged
    def fake_log(name, diverge):
        path = os.path.join(d, name)
        subprocess.run([sys.executable, os.path.join(HERE, "fake_trainer.py"), "--seed", "7", "--log-file", path],
                       env=dict(os.environ, FAKE_DIVERGE=diverge), capture_output=True)
        return path

    Diverged = getattr(speedrun_logs, "Diverged", type("Absent", (), {}))  # (a parser without it fails the checks)

    def parsed(path):
        """The run, or an empty Run where the parser refuses it (each check below then fails, one by one)."""
        try:
            return speedrun_logs.parse(path)
        except speedrun_logs.LogError as e:
            check(f"{path} read", False, str(e))
            return speedrun_logs.Run(path=path, train=[(0, 0, 0, 0)] * 5, val=[(0, 0, 0)])
    div = fake_log("div.txt", "7:5:nan")
    r = parsed(div)
    got = r.train[4][3]
    check("a training loss logged as diverged(nan): read as diverged, nan", r.train[4][0] == 5 and
          isinstance(got, Diverged) and math.isnan(got) and repr(got) == "diverged(nan)" and
          not any(isinstance(t[3], Diverged) for t in r.train[:4]), str(r.train))
    check("a run that diverged at step 5: state diverged, naming the loss and step",
          r.state() == ("diverged", "train_loss diverged(nan) at step 5 of 20") and not r.complete, str(r.state()))
    check("a diverged run's losses as the JSON lines hold them", r.loss_sequence()[-1] == (5, "train_loss", "diverged(nan)"),
          str(r.loss_sequence()[-3:]))
    r = parsed(fake_log("div0.txt", "7:0:inf"))
    check("a validation loss logged as diverged(inf): read as diverged, inf; state diverged",
          isinstance(r.val[0][1], Diverged) and r.val[0][1] == math.inf and
          r.state() == ("diverged", "val_loss diverged(inf) at step 0 of 20"), f"{r.val} {r.state()}")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "speedrun_logs.py"), div], capture_output=True, text=True)
    check("CSV: a diverged loss as diverged(nan)",
          out.returncode == 0 and f"{div},5,20,train,,diverged(nan),500.0," in out.stdout,
          out.stdout[-300:] + out.stderr)
    # the text and the JSON lines must agree on a diverged loss: the same word, never a number
    div_json = open(os.path.splitext(div)[0] + ".jsonl").read()
    div_text = open(div).read()
    for name, text, jsonl, needle in [
        ("diverged(nan) in the text, diverged(inf) in the JSON lines", div_text, div_json.replace('"diverged(nan)"', '"diverged(inf)"'),
         "step 5"),
        ("diverged(nan) in the text, a number in the JSON lines", div_text, div_json.replace('"diverged(nan)"', "1.5"), "step 5"),
        ("a number in the text, diverged(nan) in the JSON lines", div_text.replace("train_loss:diverged(nan)", "train_loss:1.5000"),
         div_json, "step 5"),
        ("a loss in the text that is no number", div_text.replace("train_loss:diverged(nan)", "train_loss:abc"), div_json,
         "div.txt:"),
    ]:
        open(div, "w").write(text)
        open(os.path.splitext(div)[0] + ".jsonl", "w").write(jsonl)
        refused(div, f"{name}: refused", needle)

# the 2024-11-24 line form, with train_loss
with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    f.write("noise line\nstep:0/3 val_loss:10.8258 train_time:0ms step_avg:nanms\n"
            "step:1/3 train_loss:10.8 train_time:100ms step_avg:nanms\nstep:2/3 train_loss:9.5 train_time:210ms step_avg:105.00ms\n"
            "step:3/3 train_loss:9.1 train_time:320ms step_avg:106.67ms\nstep:3/3 val_loss:8.9 train_time:330ms step_avg:110.00ms\n")
r = speedrun_logs.parse(f.name)
check("2024-11-24 form: train losses", [t[3] for t in r.train] == [10.8, 9.5, 9.1], str(r.train))
check("2024-11-24 form: final values", r.final_val_loss == 8.9 and r.train_time_ms == 320 and r.complete)
os.unlink(f.name)
# CSV output
out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "speedrun_logs.py"), real[0]], capture_output=True, text=True)
rows = out.stdout.strip().split("\n")
check("CSV: header + 1480 train + 13 val rows", out.returncode == 0 and len(rows) == 1 + 1480 + 13, str(len(rows)))

# ------------------------------------------------------------------ statistics
x = [3.28, 3.27, 3.29, 3.30]  # mean 3.285; deviations -.005 -.015 .005 .015; sum sq = .0005; var = .0005/3
check("mean", abs(st.mean(x) - 3.285) < 1e-12)
check("sample std", abs(st.std(x) - math.sqrt(0.0005 / 3)) < 1e-12, str(st.std(x)))
# t table (two-sided 5%): df 1: 12.706, df 3: 3.182, df 4: 2.776, df 9: 2.262, df 10: 2.228, df 39: 2.023
for df, t in [(1, 12.706), (3, 3.182), (4, 2.776), (9, 2.262), (10, 2.228), (39, 2.023)]:
    check(f"t quantile df={df}", abs(st.t_quantile(0.975, df) - t) < 1e-3, str(st.t_quantile(0.975, df)))
    check(f"two-sided p at the 5% point, df={df}", abs(st.t_sf2(t, df) - 0.05) < 2e-4, str(st.t_sf2(t, df)))
check("p of t=0 is 1", abs(st.t_sf2(0.0, 7) - 1) < 1e-12)
check("CI half-width", abs(st.ci95(x) - 3.182 * math.sqrt(0.0005 / 3) / 2) < 1e-4, str(st.ci95(x)))
# Welch by hand: a = [1,2,3,4] (mean 2.5, var 5/3), b = [2,4,6,8,10] (mean 6, var 10)
# se^2 = 5/12 + 2 = 29/12; t = -3.5 / sqrt(29/12) = -2.2515; df = (29/12)^2 / ((5/12)^2/3 + 2^2/4) = 5.4996
t, df, p = st.welch([1, 2, 3, 4], [2, 4, 6, 8, 10])
check("Welch t", abs(t + 3.5 / math.sqrt(29 / 12)) < 1e-12, str(t))
check("Welch df", abs(df - (29 / 12) ** 2 / ((5 / 12) ** 2 / 3 + 1)) < 1e-12, str(df))
check("Welch p between the df=5 and df=6 table values for t=2.2515", 0.068 < p < 0.075, str(p))
check("identical samples: p = 1", st.welch([1.0, 1.0], [1.0, 1.0])[2] == 1.0)
# paired: differences 1, 2, 3 -> mean 2, sd 1, t = 2 / (1 / sqrt 3) = 3.4641, df 2; the t table
# (df 2) puts t = 2.920 at two-sided 0.10 and 4.303 at 0.05, and 2 * (1 - F(3.4641)) with
# F(t) = 1/2 + t / (2 sqrt(2 + t^2)) for df 2 gives p = 1 - 3.4641 / sqrt(14) = 0.07418
m, sd, t, df, p = st.paired([11, 22, 33], [10, 20, 30])
check("paired t-test against the hand-computed value (df 2 closed form)",
      abs(m - 2) < 1e-12 and abs(sd - 1) < 1e-12 and abs(t - 2 * math.sqrt(3)) < 1e-9 and df == 2 and
      abs(p - (1 - 2 * math.sqrt(3) / math.sqrt(14))) < 1e-9, f"{m} {sd} {t} {df} {p}")
check("paired: identical pairs give p = 1", st.paired([1.0, 2.0], [1.0, 2.0])[4] == 1.0)
check("paired: unequal lengths give nan", math.isnan(st.paired([1.0, 2.0], [1.0])[4]))
check("Welch p against the t distribution's tail at Welch's df (scipy's and the formula's agree)",
      abs(p - st.t_sf2(t, df)) < 1e-9, f"{p} {st.t_sf2(t, df)}")

# power (two-sided 5%, 80%): runs a side for effect sizes 0.5, 0.8 and 1.0 standard deviations are
# 64, 26 and 17 in Cohen's table (Statistical Power Analysis, 1988, table 2.4.1)
for d, n in [(0.5, 64), (0.8, 26), (1.0, 17)]:
    check(f"runs needed for d = {d}: {n} (Cohen)", st.runs_needed(d, 1.0) == n, str(st.runs_needed(d, 1.0)))
    check(f"runs needed scale with the spread (d = {d} as 2d / 2sd)", st.runs_needed(2 * d, 2.0) == n)
# detectable difference with 15 a side: by the normal approximation (z_.975 + z_.8) sqrt(2/15) =
# (1.95996 + 0.84162) * 0.365148 = 1.02299 sd; the t distribution's fatter tails make it a little
# larger; and at that size the power, computed from its definition with scipy's noncentral t
# (P(|T'| > t_.975,28), T' with noncentrality d sqrt(15/2)), is 80%
d15 = st.detectable_difference(1.0, 15)
check("detectable with 15 a side: just above the normal approximation 1.02299 sd", 1.023 < d15 < 1.08, str(d15))
from scipy import stats as _stats  # noqa: E402
tc = _stats.t.ppf(0.975, 28)
pw = _stats.nct.sf(tc, 28, d15 * math.sqrt(7.5)) + _stats.nct.cdf(-tc, 28, d15 * math.sqrt(7.5))
check("detectable with 15 a side: 80% power by the definition", abs(pw - 0.8) < 1e-6, str(pw))
check("detectable difference scales with the spread", abs(st.detectable_difference(0.01, 15) - 0.01 * d15) < 1e-12)
check("detectable with 64 a side is about 0.5 sd (Cohen)", abs(st.detectable_difference(1.0, 64) - 0.4991) < 1e-3,
      str(st.detectable_difference(1.0, 64)))
check("a huge effect needs the minimum of 2 runs a side", st.runs_needed(9.0, 1.0) == 2)
check("no spread: any difference is seen", st.detectable_difference(0.0, 5) == 0.0)

# ------------------------------------------------------------------ runner + report
fake = os.path.join(HERE, "fake_trainer.py")
with tempfile.TemporaryDirectory() as d:
    camp = os.path.join(d, "camp")
    base = [sys.executable, os.path.join(ROOT, "scripts", "ab_run.py"), "--campaign", camp, "--runs", "3",
            "--trainer", f"{sys.executable} {fake}", "--variant", "uni=--window-mask uni", "--variant", "bi=--window-mask bi"]
    r = subprocess.run(base + ["--dry-run", "--gpus", "1,2"], capture_output=True, text=True)
    check("dry run lists 12 runs", r.returncode == 0 and "12 to run" in r.stdout, r.stdout + r.stderr)
    check("2-GPU runs go through mpirun", "mpirun -np 2" in r.stdout and "--seed 1002" in r.stdout)
    check("dry run writes no log", not glob.glob(os.path.join(camp, "*.txt")))
    r = subprocess.run(base + ["--variant", "bad/name=x"], capture_output=True, text=True)
    check("bad variant name refused", r.returncode == 2, r.stderr)
    env = dict(os.environ, FAKE_FAIL_SEED="1001")
    r = subprocess.run(base + ["--", "--causal", "1"], capture_output=True, text=True, env=env)
    check("a failing run stops the campaign with its log named", r.returncode == 1 and "uni_g1_r1.txt" in r.stderr, r.stderr)
    check("runs before the failure are complete", speedrun_logs.parse(os.path.join(camp, "uni_g1_r0.txt")).complete)
    r = subprocess.run(base + ["--", "--causal", "1"], capture_output=True, text=True)
    check("variants take turns: uni r0, bi r0, then uni r1", speedrun_logs.parse(os.path.join(camp, "bi_g1_r0.txt")).complete)
    check("resume skips the complete runs and runs the rest", r.returncode == 0 and "2 complete, 4 to run" in r.stdout, r.stdout)
    r = subprocess.run(base + ["--", "--causal", "1"], capture_output=True, text=True)
    check("a finished campaign runs nothing", r.returncode == 0 and "6 complete, 0 to run" in r.stdout, r.stdout)
    # report: with causal on, uni and bi give identical losses; times differ (the fake adds 5 ms)
    out = os.path.join(d, "report")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--logs-dir", camp, "--out", out,
                        "--title", "test"], capture_output=True, text=True)
    rep = open(os.path.join(out, "report.md")).read() if os.path.exists(os.path.join(out, "report.md")) else ""
    check("report written", r.returncode == 0 and rep.startswith("# test"), r.stderr)
    check("report: 3 complete runs per variant", rep.count("| 3 (3) |") == 2, rep)
    check("report: paired losses identical under causal", rep.count("| yes |") == 3, rep)
    # the verdict "identical to the bit" is the JSON lines' exact values: a loss edited by 1e-6 in
    # one .jsonl (within the text's 4 decimals, so still that run's) makes its pair differ; a pair
    # whose JSON lines hold no losses (the text's 4 decimals alone) is not called identical
    import shutil
    camp_id = os.path.join(d, "camp_id")
    shutil.copytree(camp, camp_id)
    j = os.path.join(camp_id, "bi_g1_r0.jsonl")
    events = [json.loads(l) for l in open(j)]
    events[2]["train_loss"] += 1e-6
    open(j, "w").write("".join(json.dumps(ev) + "\n" for ev in events))
    for name in ("uni_g1_r2.jsonl", "bi_g1_r2.jsonl"):
        events = [json.loads(l) for l in open(os.path.join(camp_id, name))]
        open(os.path.join(camp_id, name), "w").write("".join(json.dumps({k: v for k, v in ev.items() if not k.endswith("_loss")}) + "\n"
                                                             for ev in events))
    out_id = os.path.join(d, "report_id")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--logs-dir", camp_id, "--out", out_id],
                       capture_output=True, text=True)
    rep_id = open(os.path.join(out_id, "report.md")).read() if r.returncode == 0 else ""
    rows = {s: l for s in (1000, 1001, 1002) for l in rep_id.splitlines() if l.startswith(f"| 1 | uni vs bi | {s} |")}
    check("identical to the bit: a loss edited by 1e-6 in one run's JSON lines flips its pair to no",
          rows.get(1000, "").endswith("| no |") and rows.get(1001, "").endswith("| yes |"), r.stderr + str(rows))
    check("identical to the bit: a pair without losses in its JSON lines is not called identical",
          rows.get(1002, "").endswith("| not known (equal as printed, to 4 decimals: no losses in JSON lines) |"), str(rows))
    check("report: each group's seeds, from the runs' configurations", rep.count("| 3 | 1000-1002 |") == 2, rep)
    check("report: what the variants differ in is named", "The variants differ in: window_mask (uni: uni, bi: bi)" in rep, rep)
    check("report: pairs by seed", "| 1 | bi | uni | 3 (1000-1002) |" in rep and "| 1 | uni vs bi | 1002 |" in rep, rep)
    # final val = 5/21 + 0.001 * seed; seeds 1000..1002 -> mean 5/21 + 1.001
    check("report: mean final loss", f"{5 / 21 + 1.001:.4f}" in rep, rep)
    check("report: plots", os.path.exists(os.path.join(out, "val_loss.png")) and os.path.exists(os.path.join(out, "step_times.png")))
    check("report: what the runs can see, per metric, with 15 a side and the runs for 0.2% and 0.4%",
          "How much these runs can see" in rep and "runs for 0.2%" in rep and "| 1 | bi | step avg (ms) | 3 |" in rep, rep)
    # the loss at each validation step: seeds 1000..1002 give final losses 5/21 + 1.000..1.002 (std 0.001), the
    # same in both variants under causal, so the difference is 0 and Welch's p is 1
    check("report: validation loss per step, mean +- std, difference and p",
          f"| 1 | 20 | {5 / 21 + 1.001:.4f} +- 0.0010 | {5 / 21 + 1.001:.4f} +- 0.0010 | 0.0000 (1.000) |" in rep, rep)
    out_lo = os.path.join(d, "report_loss_only")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--logs-dir", camp, "--out", out_lo,
                        "--loss-only"], capture_output=True, text=True)
    rep_lo = open(os.path.join(out_lo, "report.md")).read() if r.returncode == 0 else ""
    check("report --loss-only: the loss without times or the step-time plot",
          "final val loss" in rep_lo and "train time" not in rep_lo and "step avg" not in rep_lo and
          os.path.exists(os.path.join(out_lo, "val_loss.png")) and not os.path.exists(os.path.join(out_lo, "step_times.png")),
          r.stderr + rep_lo)
    # causal off: bi shifts the loss, sequences differ
    camp2 = os.path.join(d, "camp2")
    base2 = [a if a != camp else camp2 for a in base]
    r = subprocess.run(base2 + ["--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--logs-dir", camp2, "--out", out],
                       capture_output=True, text=True)
    rep = open(os.path.join(out, "report.md")).read()
    check("report: causal off, sequences differ", rep.count("| no |") == 3 and "| yes |" not in rep, rep)
    # Welch p for final loss: identical spreads, shift 0.01 -> t = 0.01 / sqrt(2 * var / 3) with var of seeds/1000
    check("report: t-test row present", "| 1 | bi | uni | final val loss |" in rep, rep)

    # a campaign resumed with other flags is refused, its logs untouched; --start-over moves them aside
    before = sorted(os.listdir(camp))
    r = subprocess.run(base + ["--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    check("campaign resumed with changed common flags: refused (exit 1), naming the change, nothing touched",
          r.returncode == 1 and "other flags" in r.stderr and "--causal" in r.stderr and sorted(os.listdir(camp)) == before and
          "Traceback" not in r.stderr, r.stderr)
    r = subprocess.run([a if a != "bi=--window-mask bi" else "bi=--window-mask bi --steps 30" for a in base] + ["--", "--causal", "1"],
                       capture_output=True, text=True)
    check("campaign resumed with a variant's flags changed: refused", r.returncode == 1 and "variants" in r.stderr, r.stderr)
    r = subprocess.run(base + ["--start-over", "--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    olds = glob.glob(os.path.join(camp, "old-*"))
    check("--start-over: the old logs moved into old-*/, the campaign run anew",
          r.returncode == 0 and len(olds) == 1 and len(glob.glob(os.path.join(olds[0], "*.txt"))) == 6 and "0 complete, 6 to run" in r.stdout,
          r.stdout + r.stderr)
    open(os.path.join(camp, "campaign.json"), "w").write('{"variants": [')
    r = subprocess.run(base + ["--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    check("a damaged campaign record (bad JSON): refused with a message", r.returncode == 1 and "campaign.json" in r.stderr and
          "Traceback" not in r.stderr, r.stderr)
    json.dump({"variants": "garbage"}, open(os.path.join(camp, "campaign.json"), "w"))
    r = subprocess.run(base + ["--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    check("a campaign record without the defining fields: refused", r.returncode == 1 and "not a campaign record" in r.stderr, r.stderr)

    # the report: two groups of one name are refused, not merged
    rep_dir = os.path.join(d, "rep2")
    pat = os.path.join(camp2, "uni_g1_r*.txt")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--group", f"x@1={pat}", "--group",
                        f"x@1={os.path.join(camp2, 'bi_g1_r*.txt')}", "--out", rep_dir], capture_output=True, text=True)
    check("report: two groups named alike are refused", r.returncode == 1 and "given twice" in r.stderr and
          not os.path.exists(rep_dir), r.stderr)
    # runs that diverged, as train_gpt logs them (diverged(nan) / diverged(inf) in both files, and
    # the run stops there): counted, named with the loss and step, and left out of the statistics
    # (the report is written), as the help promises
    for log, variant, seed, diverge in [("bi_g1_r0.txt", "bi", 1000, "1000:7:nan"), ("uni_g1_r1.txt", "uni", 1001, "1001:0:inf")]:
        subprocess.run([sys.executable, fake, "--window-mask", variant, "--causal", "0", "--allow-target-leak", "--seed", str(seed),
                        "--log-file",
                        os.path.join(camp2, log)], env=dict(os.environ, FAKE_DIVERGE=diverge), capture_output=True)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--logs-dir", camp2, "--out", rep_dir],
                       capture_output=True, text=True)
    rep = open(os.path.join(rep_dir, "report.md")).read() if os.path.exists(os.path.join(rep_dir, "report.md")) else ""
    check("report: two diverged runs counted per group, named with their seed, loss and step (report and stderr), left out",
          r.returncode == 0 and "2 run(s) left out of the statistics" in rep and "| bi | 1 | 3 (2) |" in rep and
          "| uni | 1 | 3 (2) |" in rep and "bi_g1_r0.txt | diverged (seed 1000: train_loss diverged(nan) at step 7 of 20) |" in rep and
          "uni_g1_r1.txt | diverged (seed 1001: val_loss diverged(inf) at step 0 of 20) |" in rep and "bi_g1_r0.txt" in r.stderr and
          "uni_g1_r1.txt" in r.stderr, rep + r.stderr)
    check("report: the diverged runs are not paired (seed 1002 alone is in both variants)",
          "| 1 | bi | uni | 1 | n/a (fewer than 2 pairs) |" in rep and "| 1 | uni vs bi | 1002 |" in rep and
          "| 1 | uni vs bi | 1000 |" not in rep, rep)
    # a diverged run whose log is cut short before the divergence is incomplete, and still refused
    for name, gone in (("bi_g1_r0.txt", "step:3/20 "), ("bi_g1_r0.jsonl", '"step": 3,')):
        lines = open(os.path.join(camp2, name)).readlines()
        open(os.path.join(camp2, name), "w").write("".join(l for l in lines if gone not in l))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--logs-dir", camp2, "--out", rep_dir],
                       capture_output=True, text=True)
    check("report: a damaged log (a step missing before its divergence) is refused, not counted as diverged",
          r.returncode == 1 and "bi_g1_r0.txt: incomplete: step 3 of 20 is missing" in r.stderr, r.stderr)

# ------------------------------------------------------------------ ablations/mask_pairs.py
with tempfile.TemporaryDirectory() as d:
    def case(name, prefix, window, docs, tf, tfb, D=128):
        return json.dumps({"case": name, "T": 65536, "H": 6, "D": D, "causal": 1, "window": window, "blocks": 0, "bidir": 0,
                           "docs": docs, "prefix": prefix, "fwd_tflops": tf, "fwdbwd_tflops": tfb}) + "\n"
    rounds = []
    for r, (a, b) in enumerate([(220, 221), (222, 223), (224, 225)]):
        path = os.path.join(d, f"r{r}.json")
        with open(path, "w") as f:
            f.write(case("causal + prefix 256 + 1024 uni + docs", 256, 1024, 1, a, 200.0 + r))
            f.write(case("causal + 1024 uni + docs", 0, 1024, 1, b, 200.0 + r))
            f.write(case("causal + prefix 256 + 1024 uni + docs", 256, 1024, 1, 1.0, 1.0, D=64))  # no partner at D 64
            f.write(case("causal + 128 uni", 0, 128, 0, 100.0, 90.0))
        rounds.append(path)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "ablations", "mask_pairs.py")] + rounds, capture_output=True, text=True)
    rows = [l for l in r.stdout.splitlines() if l.startswith("| 65536")]
    from scipy import stats as sps
    p_fwd = sps.ttest_ind([220, 222, 224], [221, 223, 225], equal_var=False).pvalue
    check("mask_pairs: one pair (the prefix case without a partner left out), both directions",
          r.returncode == 0 and len(rows) == 2 and "| 3 | forward |" in rows[0] and "222.0 +- 2.0 | 223.0 +- 2.0" in rows[0] and
          f"{222 / 223:.4f}" in rows[0] and f"{p_fwd:.3f}" in rows[0] and "| 1.0000 | 1.000 |" in rows[1], r.stdout + r.stderr)
    bad = os.path.join(d, "bad.json")
    open(bad, "w").write("{not json\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "ablations", "mask_pairs.py"), bad], capture_output=True, text=True)
    check("mask_pairs: a file that is not the benchmark's is refused naming it", r.returncode == 1 and "bad.json:1" in r.stderr and
          "Traceback" not in r.stderr, r.stderr)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "ablations", "mask_pairs.py"), rounds[0], "--out", rounds[1]],
                       capture_output=True, text=True)
    check("mask_pairs: --out onto an existing file is refused", r.returncode == 1 and "Traceback" not in r.stderr, r.stderr)

# ab_run's plan: every count bounded (refused at once, naming the flag and the bound); campaign.json
# records the plan, kept when a resume extends it; ab_report states planned, ran and missing, and a
# partial campaign's report says "partial" in its first line; an older record stays readable.
AB_RUN = [sys.executable, os.path.join(ROOT, "scripts", "ab_run.py")]
FAKE_TRAINER = f"{sys.executable} {os.path.join(HERE, 'fake_trainer.py')}"
with tempfile.TemporaryDirectory() as d:
    camp = os.path.join(d, "camp")
    for flags, named in ((["--runs", "100000000"], "--runs 100000000: want 1 to 1000"),
                         (["--gpus", ",".join(map(str, range(1, 80)))], "--gpus wants at most 64"),
                         (["--runs", "1000", "--gpus", "1,2,3,4,5,6,7,8,9,10,11,12", "--variant", "c=x", "--variant", "e=y",
                           "--variant", "f=z", "--variant", "g=w", "--variant", "h=v", "--variant", "i=u", "--variant", "j=t"],
                          "plans 108000 runs: at most 100000"),
                         (["--seed0", str(2 ** 64 - 2), "--runs", "3"], "--seed0 18446744073709551614: want 0 to")):
        t0 = time.time()
        try:
            r = subprocess.run(AB_RUN + ["--campaign", camp, "--dry-run", "--variant", "a=x", "--variant", "b=y"] + flags,
                               capture_output=True, text=True, timeout=20)
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired:
            rc, err = "hung", "still running after 20 s"
        check(f"ab_run {' '.join(flags)[:40]}: refused at once (exit 2, within 5 s), naming the flag and the bound",
              rc == 2 and named in err and time.time() - t0 < 5 and not os.path.exists(camp), err[-300:])
    base = AB_RUN + ["--campaign", camp, "--trainer", FAKE_TRAINER, "--variant", "uni=--window-mask uni", "--variant",
                     "bi=--window-mask bi"]
    r = subprocess.run(base + ["--runs", "2", "--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    r = subprocess.run(base + ["--runs", "3", "--gpus", "1", "--dry-run", "--", "--causal", "0", "--allow-target-leak"],
                       capture_output=True, text=True)
    rec = json.load(open(os.path.join(camp, "campaign.json")))
    check("campaign.json records the plan: variants x GPU counts x seeds",
          rec.get("plan") == {"variants": ["uni", "bi"], "gpus": [1], "seeds": [1000, 1001]}, str(rec.get("plan")))
    subprocess.run(base + ["--runs", "3", "--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    r = subprocess.run(base + ["--runs", "1", "--", "--causal", "0", "--allow-target-leak"], capture_output=True, text=True)
    rec = json.load(open(os.path.join(camp, "campaign.json")))
    check("a resume with fewer --runs keeps the plan it extended (3 seeds)",
          r.returncode == 0 and (rec.get("plan") or {}).get("seeds") == [1000, 1001, 1002], str(rec.get("plan")) + r.stderr)
    report = [sys.executable, os.path.join(ROOT, "scripts", "ab_report.py"), "--logs-dir", camp, "--out", os.path.join(d, "rep")]
    r = subprocess.run(report, capture_output=True, text=True)
    check("ab_report of the whole campaign: 6 planned, ran 6, missing 0, not partial", r.returncode == 0 and
          "= 6 runs; ran 6; missing 0." in r.stdout and "partial" not in r.stdout.splitlines()[0], r.stdout[:300] + r.stderr)
    for f in glob.glob(os.path.join(camp, "bi_g1_r2.*")) + glob.glob(os.path.join(camp, "uni_g1_r1.*")):
        os.remove(f)
    r = subprocess.run(report, capture_output=True, text=True)
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check("ab_report of a partial campaign: 'partial' in its first line, the missing runs named",
          r.returncode == 0 and first == "# Ablation report (partial: 2 of 6 planned runs missing)" and
          "Missing: uni@1 seed 1001, bi@1 seed 1002." in r.stdout and "partial" in r.stderr, r.stdout[:600] + r.stderr)
    for f in glob.glob(os.path.join(camp, "bi_g1_r*.*")):  # a whole variant gone
        os.remove(f)
    r = subprocess.run(report, capture_output=True, text=True)
    check("ab_report with a planned variant's every run gone: partial, that variant's runs named missing",
          r.returncode == 0 and "partial: 4 of 6" in r.stdout.splitlines()[0] and "bi@1 seed 1000" in r.stdout, r.stdout[:600] + r.stderr)
    rec.pop("plan", None)
    json.dump(dict(rec, runs=3), open(os.path.join(camp, "campaign.json"), "w"))
    r = subprocess.run(report, capture_output=True, text=True)
    check("an older campaign.json (no plan): the plan taken from its gpus, runs and seed0, said so",
          r.returncode == 0 and "campaign.json's gpus, runs and seed0" in r.stdout and "partial: 4 of 6" in r.stdout.splitlines()[0],
          r.stdout[:600] + r.stderr)
    for k in ("runs", "gpus"):
        rec.pop(k, None)
    json.dump(rec, open(os.path.join(camp, "campaign.json"), "w"))
    r = subprocess.run(report, capture_output=True, text=True)
    check("a campaign.json with neither plan nor runs: read, the report says the plan cannot be told",
          r.returncode == 0 and "holds no plan: what is missing cannot be told" in r.stdout, r.stdout[:600] + r.stderr)

# ablations/learning_compare.sh resumed with another SEED0 or other flags: its complete logs are
# not the runs asked for, so it refuses (naming the log and the setting) and runs nothing; with the
# same settings it keeps them. Run in a copy of the script's folders with the stand-in trainer as
# ./train_gpt.
with tempfile.TemporaryDirectory() as d:
    for sub in ("ablations", "scripts"):
        shutil.copytree(os.path.join(ROOT, sub), os.path.join(d, sub))
    with open(os.path.join(d, "train_gpt"), "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} {os.path.join(HERE, 'fake_trainer.py')} \"$@\"\n")
    os.chmod(os.path.join(d, "train_gpt"), 0o755)
    for name in ("x_train_000001.bin", "x_val_000000.bin"):
        open(os.path.join(d, name), "wb").write(b"\0" * 1024)
    logs = os.path.join(d, "logs")

    def compare(**env):
        e = dict(os.environ, LOG_DIR=logs, DATA=os.path.join(d, "x"), VARIANTS="train_gpt", RUNS="2", STEPS="20", VAL_EVERY="10")
        e.update(env)
        return subprocess.run(["bash", os.path.join(d, "ablations", "learning_compare.sh")], capture_output=True, text=True, env=e)
    r = compare(SEED0="0")
    check("learning_compare: two runs with the stand-in trainer", r.returncode == 0 and
          len(glob.glob(os.path.join(logs, "train_gpt_g1_r*.txt"))) == 2, r.stdout + r.stderr)
    before = {p: open(p).read() for p in glob.glob(os.path.join(logs, "*")) if os.path.isfile(p)}
    r = compare(SEED0="5")
    check("learning_compare resumed with another SEED0: refused naming the log and the seed, nothing run", r.returncode == 1 and
          "train_gpt_g1_r0.txt: a run of seed 0, where seed 5 is asked for" in r.stderr and "start:" not in r.stdout and
          "Traceback" not in r.stderr and {p: open(p).read() for p in before} == before, r.stdout + r.stderr)
    r = compare(SEED0="0", VAL_EVERY="5")
    check("learning_compare resumed with another VAL_EVERY: refused naming val_every", r.returncode == 1 and
          "val_every 10, where --val-every 5" in r.stderr and "start:" not in r.stdout, r.stdout + r.stderr)
    r = compare(SEED0="0")
    check("learning_compare resumed as it was: the logs kept, nothing run", r.returncode == 0 and r.stdout.count("kept:") == 2 and
          "start:" not in r.stdout, r.stdout + r.stderr)
    # a log of another preset or another trainer is not the run asked for either; nor does a
    # malformed argument of resume_check.py pass (exit 2, naming it)
    record = os.path.join(ROOT, "results", "records", "2026-12-07_default_job_h100", "logs", "run_01")
    moved = os.path.join(d, "moved")
    os.makedirs(moved)
    for ext in (".txt", ".jsonl"):
        os.replace(os.path.join(logs, "train_gpt_g1_r0" + ext), os.path.join(moved, "r0" + ext))
        shutil.copy(record + ext, os.path.join(logs, "train_gpt_g1_r0" + ext))
    r = compare(SEED0="1337", RUNS="1", STEPS="300", VAL_EVERY="50", VAL_TOKENS="65536")
    check("learning_compare with a default-preset train_gpt log in place: refused naming the log and the preset, nothing run",
          r.returncode == 1 and "train_gpt_g1_r0.txt: its configuration has preset 'default', where --preset speedrun" in r.stderr
          and "start:" not in r.stdout and "kept:" not in r.stdout, r.stdout + r.stderr)
    for ext in (".txt", ".jsonl"):
        os.replace(os.path.join(moved, "r0" + ext), os.path.join(logs, "train_gpt_g1_r0" + ext))
        shutil.copy(os.path.join(logs, "train_gpt_g1_r0" + ext), os.path.join(logs, "peer_g1_r0" + ext))
    r = compare(SEED0="0", RUNS="1", VARIANTS="peer")
    check("learning_compare with a train_gpt log as the peer's: refused naming the log and the trainer, nothing run",
          r.returncode == 1 and "peer_g1_r0.txt: a run of 'train_gpt', where torch_peer is asked for" in r.stderr
          and "start:" not in r.stdout, r.stdout + r.stderr)
    one_log = os.path.join(logs, "train_gpt_g1_r0.txt")
    RC = [sys.executable, os.path.join(ROOT, "scripts", "resume_check.py"), one_log]
    for args, flag in [(["0", "train_gpt", "--steps"], "--steps needs a value"),
                       (["0", "train_gpt", "--steps", "2e1"], "--steps '2e1'"),
                       (["0", "train_gpt", "--steps", "\u0662\u0660"], "--steps"),
                       (["\u0660", "train_gpt"], "SEED"),
                       (["0", "train_gpt", "--steps", "20", "stray"], "'stray'"),
                       (["0", "peer"], "TRAINER"),
                       (["0"], "TRAINER")]:
        r = subprocess.run(RC + args, capture_output=True, text=True)
        check(f"resume_check {args}: refused as a bad argument (exit 2) naming {flag}",
              r.returncode == 2 and flag in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr)
    r = subprocess.run(RC + ["0", "train_gpt", "--preset", "default", "--steps=20", "--val-every", "10"], capture_output=True, text=True)
    check("resume_check: a speedrun-preset log asked as default: refused naming the preset (exit 1)",
          r.returncode == 1 and "preset 'speedrun', where --preset default" in r.stderr, r.stderr)
    r = subprocess.run(RC + ["0", "train_gpt", "--preset", "speedrun", "--steps=20", "--val-every", "10"], capture_output=True, text=True)
    check("resume_check: the log asked as it was: accepted", r.returncode == 0, r.stderr)

finish("ablation-tools")
