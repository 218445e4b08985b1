"""peer/peer_full_run.sh without a GPU: its variables refused (exit 2, naming the variable,
nothing written); a folder whose runs are all finished read into the table with no GPU needed
(train_time, step average, final validation, peak memory, start-up, and the two ratios, from the
logs' JSON lines); a log of another GPU count, step count or data refused (exit 1, naming it,
an earlier summary.txt kept); and a folder with an unfinished run left as it is when no GPU is
there to run it. A stand-in nvidia-smi that finds no GPU keeps the script off any real GPU.

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
from harness import check, finish  # noqa: E402

SCRIPT = ["bash", os.path.join(root, "peer", "peer_full_run.sh")]
TRAIN = "data/synthetic_full/synth_train_*.bin"
tmp = tempfile.mkdtemp(prefix="peer_full_run_")
fake_bin = os.path.join(tmp, "bin")
os.makedirs(fake_bin)
with open(os.path.join(fake_bin, "nvidia-smi"), "w") as f:
    f.write("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
os.chmod(os.path.join(fake_bin, "nvidia-smi"), stat.S_IRWXU)
ENV = dict(os.environ, PATH=fake_bin + os.pathsep + os.environ.get("PATH", ""))


def run(**env):
    e = dict(ENV)
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
    check(f"a log of another {what}: refused (exit 1), naming the file and the setting, no traceback",
          r.returncode == 1 and "peer_g4.jsonl" in r.stderr and needle in r.stderr and "Traceback" not in r.stderr,
          f"rc {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
    check(f"a log of another {what}: the earlier summary.txt kept", open(os.path.join(mixed, "summary.txt")).read() == "an earlier table\n")

# --- JSON lines that are not JSON: refused, naming the file
broken = os.path.join(tmp, "broken")
os.makedirs(broken)
write_run(broken, "train_gpt", 1, 20, 9000.0, 27000.0, 11.0, 8.0)
with open(os.path.join(broken, "train_gpt_g1.jsonl"), "a") as f:
    f.write("{not json\n")
r = run(GPUS="1", STEPS="20", LOG_DIR=broken, RUNS="train_gpt")
check("JSON lines that do not parse: refused (exit 1), naming the file", r.returncode == 1 and "train_gpt_g1.jsonl" in r.stderr
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

finish("peer-full-run")
