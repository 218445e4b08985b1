"""peer/peer_full_run.sh (and peer/full_run_logs.py, which reads its logs) without a GPU: its
variables refused (exit 2, naming the variable, nothing written); a folder whose runs are all
finished read into the table with no GPU needed (train_time, step average, final validation, peak
memory, start-up, and the two ratios, from the logs' JSON lines); a log of another GPU count, step
count or data refused before anything runs (exit 2, naming it, nothing moved, an earlier
summary.txt kept); a folder with an unfinished run left as it is when no GPU is there to run it.
A stand-in nvidia-smi that finds no GPU keeps the script off any real GPU; one that lists a GPU,
with a stand-in peer (PYTHON_TORCH) that writes a finished log, drives the run path: an unfinished
log moved into incomplete/ and the run made again, a finished one kept and not run again, a
failing run ending the script with its output's tail, and no build when only the peer runs.

    python3 tests/test_peer_full_run.py
"""
import json
import os
import stat
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
from harness import check, finish, no_gpu_env  # noqa: E402

SCRIPT = ["bash", os.path.join(root, "peer", "peer_full_run.sh")]
TRAIN = "data/synthetic_full/synth_train_*.bin"
tmp = tempfile.mkdtemp(prefix="peer_full_run_")
fake_bin = os.path.join(tmp, "bin")
ENV = no_gpu_env(fake_bin)


def run(base=None, **env):
    e = dict(base or ENV)
    e.update(env)
    return subprocess.run(SCRIPT, capture_output=True, text=True, timeout=60, env=e)


def write_run(folder, trainer, gpus, steps, train_time_ms, peak_mib, val_loss, startup, train=TRAIN, finished=True):
    """A run's text log and JSON lines as the trainers write them (the fields the script reads)."""
    name = os.path.join(folder, f"{trainer}_g{gpus}")
    ev = [{"event": "config", "trainer": trainer, "run_id": f"{trainer}{gpus}{steps}", "train_data": train,
           "steps": steps, "world_size": gpus},
          {"event": "val", "step": 0, "total_steps": steps, "train_time_ms": 0.0, "val_loss": 10.8258},
          {"event": "startup", "startup_s": startup}]
    last = steps if finished else steps // 2
    for s in range(1, last + 1):
        t = 0.0 if s <= 10 else train_time_ms * (s - 10) / (steps - 10)
        ev.append({"event": "step", "step": s, "total_steps": steps, "train_time_ms": t, "train_loss": 5.0})
    lines = [f"step:{e['step']}/{steps} train_time:{e['train_time_ms']:.0f}ms step_avg:nanms" for e in ev if e["event"] == "step"]
    if finished:
        ev.append({"event": "val", "step": steps, "total_steps": steps, "train_time_ms": train_time_ms, "val_loss": val_loss})
        ev.append({"event": "summary", "timed_steps": steps - 10, "peak_memory_mib": peak_mib})
        lines.append(f"step:{steps}/{steps} val_loss:{val_loss:.4f} train_time:{train_time_ms:.0f}ms "
                     f"step_avg:{train_time_ms / (steps - 10):.2f}ms")
    with open(name + ".jsonl", "w") as f:
        f.write("".join(json.dumps(e) + "\n" for e in ev))
    with open(name + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")


# --- variables out of range: exit 2, one line naming the variable, nothing written
never = os.path.join(tmp, "never")
a_file = os.path.join(tmp, "a_file")
open(a_file, "w").write("not a folder\n")
for var, value, needle in (("GPUS", "3", "GPUS: 3 does not divide"), ("GPUS", "0", "GPUS must be a whole number from 1 to 8"),
                           ("GPUS", "16", "GPUS must be"), ("GPUS", "two", "GPUS must be"), ("GPUS", "4,", "GPUS must be"),
                           ("STEPS", "10", "STEPS must be a whole number from 11"), ("STEPS", "1e3", "STEPS must be"),
                           ("STEPS", "99999999999999999999", "STEPS must be"), ("RUNS", "bogus", "RUNS: unknown run 'bogus'"),
                           ("RUNS", "peer peer", "RUNS: peer is listed twice"), ("RUNS", " ", "RUNS names no run"),
                           ("LOG_DIR", a_file, "is not a folder")):
    env = {"LOG_DIR": never, var: value}
    r = run(**env)
    check(f"{var}={value!r} refused (exit 2), naming it, nothing written",
          r.returncode == 2 and needle in r.stderr and not os.path.exists(never) and len(r.stderr.strip().splitlines()) == 1
          and "Traceback" not in r.stderr, f"rc {r.returncode}: {r.stderr[-300:]}")
check("the file given as LOG_DIR is untouched", open(a_file).read() == "not a folder\n")

# --- both runs finished: the table, without a GPU
done = os.path.join(tmp, "done")
os.makedirs(done)
write_run(done, "train_gpt", 4, 20, 2300.0, 27137.0, 11.3069, 11.8)
write_run(done, "peer", 4, 20, 3000.0, 33927.0, 11.2001, 82.0)
r = run(GPUS="4", STEPS="20", LOG_DIR=done)
rows = {ln.split()[0]: ln.split()[1:] for ln in r.stdout.splitlines()
        if len(ln.split()) == 6 and ln.split()[0] in ("train_gpt", "peer")}
check("finished runs: exit 0 with no GPU, a row for each", r.returncode == 0 and sorted(rows) == ["peer", "train_gpt"],
      r.stdout + r.stderr)
check("train_gpt's row: train_time 2.3 s, step average 230.00 ms (2300 / 10 timed steps), final val, peak, start-up",
      rows.get("train_gpt") == ["2.3", "230.00", "11.3069", "27137", "11.8"], str(rows.get("train_gpt")))
check("the peer's row", rows.get("peer") == ["3.0", "300.00", "11.2001", "33927", "82.0"], str(rows.get("peer")))
check("the ratios: train_time 2300 / 3000, peak memory 27137 / 33927",
      "train_gpt / peer: train_time 0.767, peak memory 0.800" in r.stdout, r.stdout)
span_line = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("11-20 ")]
check("the step between validations: steps 11-20, 230.00 and 300.00 ms, ratio 0.767",
      span_line == [["11-20", "230.00", "300.00", "0.767"]], r.stdout)
sys.path.insert(0, os.path.join(root, "peer"))
import full_run_logs  # noqa: E402
ev = [{"event": "val", "step": 0, "train_time_ms": 0.0}, {"event": "val", "step": 125, "train_time_ms": 23000.0},
      {"event": "step", "step": 126, "train_time_ms": 23200.0}, {"event": "val", "step": 250, "train_time_ms": 48000.0}]
got = full_run_logs.spans(ev)
check("spans: steps 11-125 from the clock's start after step 10 (23000 / 115 ms), 126-250 from the last validation (25000 / 125)",
      got == {(11, 125): 200.0, (126, 250): 200.0}, str(got))
try:
    full_run_logs.spans([{"event": "val", "step": 125, "train_time_ms": "x", "where": "a.jsonl:3"}])
    refused = "no refusal"
except full_run_logs.ToolError as e:
    refused = str(e)
check("spans: a validation time that is not a number is refused naming the line and field",
      refused.startswith("a.jsonl:3: train_time_ms is text"), refused)
check("summary.txt holds the table", os.path.isfile(os.path.join(done, "summary.txt"))
      and open(os.path.join(done, "summary.txt")).read().strip() == r.stdout.strip())
check("nothing moved aside for finished runs", not os.path.exists(os.path.join(done, "incomplete")))
r = run(GPUS="4", STEPS="20", LOG_DIR=done, RUNS="peer")
check("RUNS=peer with both finished: the table still covers both", r.returncode == 0 and "train_gpt / peer" in r.stdout, r.stdout + r.stderr)

# --- a log of another configuration in the folder: refused, the earlier summary kept
for what, kwargs, needle in (("GPU count", {"gpus_in_config": 2}, "world_size 2"),
                             ("data", {"train": "data/synthetic/synth_train_*.bin"}, "train_data"),
                             ("step count", {"steps_in_config": 30}, "steps 30")):
    mixed = os.path.join(tmp, "mixed_" + what.split()[0])
    os.makedirs(mixed)
    write_run(mixed, "train_gpt", 4, 20, 2300.0, 27137.0, 11.3069, 11.8)
    write_run(mixed, "peer", 4, 20, 3000.0, 33927.0, 11.2001, 82.0, train=kwargs.get("train", TRAIN))
    path = os.path.join(mixed, "peer_g4.jsonl")
    ev = [json.loads(ln) for ln in open(path)]
    ev[0]["world_size"] = kwargs.get("gpus_in_config", 4)
    ev[0]["steps"] = kwargs.get("steps_in_config", 20)
    open(path, "w").write("".join(json.dumps(e) + "\n" for e in ev))
    open(os.path.join(mixed, "summary.txt"), "w").write("an earlier table\n")
    r = run(GPUS="4", STEPS="20", LOG_DIR=mixed)
    check(f"a log of another {what}: refused (exit 2), naming the file and the setting, no traceback",
          r.returncode == 2 and "peer_g4.jsonl" in r.stderr and needle in r.stderr and "Traceback" not in r.stderr,
          f"rc {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
    check(f"a log of another {what}: the earlier summary.txt kept", open(os.path.join(mixed, "summary.txt")).read() == "an earlier table\n")

# --- JSON lines that are not JSON: refused, naming the file
broken = os.path.join(tmp, "broken")
os.makedirs(broken)
write_run(broken, "train_gpt", 1, 20, 9000.0, 27000.0, 11.0, 8.0)
with open(os.path.join(broken, "train_gpt_g1.jsonl"), "a") as f:
    f.write("{not json\n")
r = run(GPUS="1", STEPS="20", LOG_DIR=broken, RUNS="train_gpt")
check("JSON lines that do not parse: refused (exit 2), naming the file", r.returncode == 2 and "train_gpt_g1.jsonl" in r.stderr
      and "Traceback" not in r.stderr, f"rc {r.returncode}: {r.stderr[-300:]}")

# --- an unfinished run and no GPU: exit 1 naming the cause, the logs left where they are
partial = os.path.join(tmp, "partial")
os.makedirs(partial)
write_run(partial, "train_gpt", 2, 20, 4600.0, 27000.0, 11.0, 14.0)
write_run(partial, "peer", 2, 20, 6000.0, 33000.0, 11.0, 80.0, finished=False)
before = sorted(os.listdir(partial))
r = run(GPUS="2", STEPS="20", LOG_DIR=partial)
check("an unfinished run with no GPU: exit 1, saying so", r.returncode == 1 and "no GPU" in r.stderr and "Traceback" not in r.stderr,
      f"rc {r.returncode}: {r.stderr[-300:]}")
check("an unfinished run with no GPU: nothing moved or written", sorted(os.listdir(partial)) == before, str(os.listdir(partial)))
r = run(GPUS="2", STEPS="20", LOG_DIR=partial, RUNS="train_gpt")
check("RUNS=train_gpt, finished: its table alone, the peer's unfinished log named and left out",
      r.returncode == 0 and "peer_g2.jsonl" in r.stderr and "left out" in r.stderr and "train_gpt / peer" not in r.stdout
      and any(ln.startswith("train_gpt ") for ln in r.stdout.splitlines()), f"rc {r.returncode}: {r.stdout} {r.stderr[-300:]}")
check("RUNS=train_gpt: the peer's unfinished log not moved (it was not asked for)",
      os.path.isfile(os.path.join(partial, "peer_g2.txt")) and not os.path.exists(os.path.join(partial, "incomplete")))

# --- the run path, on a stand-in GPU with a stand-in peer
gpu_bin = os.path.join(tmp, "gpu_bin")
os.makedirs(gpu_bin)
with open(os.path.join(gpu_bin, "nvidia-smi"), "w") as f:
    f.write("#!/bin/sh\necho 'GPU 0: Stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n")
with open(os.path.join(gpu_bin, "make"), "w") as f:  # a build would be a defect when only the peer runs
    f.write("#!/bin/sh\ntouch \"$MAKE_MARK\"\nexit 1\n")
for tool in ("nvidia-smi", "make"):
    os.chmod(os.path.join(gpu_bin, tool), stat.S_IRWXU)
fake_peer = os.path.join(tmp, "fake_peer.py")
with open(fake_peer, "w") as f:
    f.write('''import json, os, sys
args = sys.argv[1:]
if args[:1] == ["-c"]:
    sys.exit(0)  # "import torch"
open(os.environ["PEER_MARK"], "a").write("ran\\n")
if os.environ.get("PEER_FAIL"):
    print("the peer fails here"); sys.exit(3)
v = lambda flag: args[args.index(flag) + 1]
steps, log = int(v("--steps")), v("--log-file")
ev = [{"event": "config", "trainer": "torch_peer", "train_data": v("--train-data"), "steps": steps, "world_size": 1},
      {"event": "startup", "startup_s": 70.0}]
ev += [{"event": "step", "step": s, "train_time_ms": 100.0 * max(0, s - 10)} for s in range(1, steps + 1)]
ev += [{"event": "val", "step": steps, "train_time_ms": 100.0 * (steps - 10), "val_loss": 10.9},
       {"event": "summary", "peak_memory_mib": 33000.0}]
open(log[:-4] + ".jsonl", "w").write("".join(json.dumps(e) + "\\n" for e in ev))
open(log, "w").write(f"step:{steps}/{steps} val_loss:10.9000 train_time:{100 * (steps - 10)}ms step_avg:100.00ms\\n")
''')
shards = os.path.join(tmp, "shards")
os.makedirs(shards)
for n in ("synth_train_000001.bin", "synth_val_000000.bin"):
    open(os.path.join(shards, n), "wb").close()
peer_mark, make_mark = os.path.join(tmp, "peer_ran"), os.path.join(tmp, "make_ran")
wrapper = os.path.join(gpu_bin, "fake_python")  # PYTHON_TORCH is one command: a script stands in for the interpreter
with open(wrapper, "w") as f:
    f.write(f"#!/bin/sh\nexec {sys.executable} {fake_peer} \"$@\"\n")
os.chmod(wrapper, stat.S_IRWXU)
GPU = dict(os.environ, PATH=gpu_bin + os.pathsep + os.environ.get("PATH", ""), PYTHON_TORCH=wrapper,
           SHARDS=shards, PEER_MARK=peer_mark, MAKE_MARK=make_mark, GPUS="1", STEPS="20", RUNS="peer")
train = os.path.join(shards, "synth_train_*.bin")

runs_dir = os.path.join(tmp, "runs")
os.makedirs(runs_dir)
write_run(runs_dir, "peer", 1, 20, 900.0, 33000.0, 11.0, 80.0, train=train, finished=False)
r = run(GPU, LOG_DIR=runs_dir)
moved = sorted(os.listdir(os.path.join(runs_dir, "incomplete"))) if os.path.isdir(os.path.join(runs_dir, "incomplete")) else []
check("an unfinished peer log: moved into incomplete/, the peer run again, its row in the table",
      r.returncode == 0 and [m.split(".")[0] + "." + m.split(".")[1] for m in moved] == ["peer_g1.jsonl", "peer_g1.txt"]
      and os.path.isfile(peer_mark) and any(ln.startswith("peer ") and "1.0" in ln.split()[1] for ln in r.stdout.splitlines()),
      f"rc {r.returncode}: {moved} {r.stdout} {r.stderr[-300:]}")
check("only the peer to run: nothing built", not os.path.exists(make_mark))
os.remove(peer_mark)
r = run(GPU, LOG_DIR=runs_dir)
check("the peer's finished log kept: not run again, the table printed", r.returncode == 0 and not os.path.exists(peer_mark)
      and "peer " in r.stdout, f"rc {r.returncode}: {r.stderr[-300:]}")
r = run(GPU, LOG_DIR=runs_dir, STEPS="30")
check("asked for another step count over a folder of 20-step logs: refused (exit 2), nothing run or moved",
      r.returncode == 2 and "steps 20 (want 30)" in r.stderr and not os.path.exists(peer_mark)
      and len(os.listdir(os.path.join(runs_dir, "incomplete"))) == 2, f"rc {r.returncode}: {r.stderr[-300:]}")
fail_dir = os.path.join(tmp, "fails")
r = run(GPU, LOG_DIR=fail_dir, PEER_FAIL="1")
check("a failing peer run: exit 1, its output's tail shown, no summary.txt", r.returncode == 1 and "the peer fails here" in r.stdout
      and not os.path.exists(os.path.join(fail_dir, "summary.txt")), f"rc {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
r = run(GPU, LOG_DIR=os.path.join(tmp, "no_shards"), SHARDS=a_file)
check("SHARDS a file, not a folder of shards: refused (exit 2), naming it", r.returncode == 2 and "SHARDS" in r.stderr,
      f"rc {r.returncode}: {r.stderr[-300:]}")

finish("peer-full-run")
