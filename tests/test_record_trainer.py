"""peer/record_trainer.sh, peer/record_trainer_patch.py and peer/record_trainer_logs.py without a
GPU and without any record's code: the trainers here are stand-ins written by this test, with the
field layout of the records' class Hyperparameters (2024: a dataclass with input_bin,
input_val_bin, num_iterations, val_loss_every, val_tokens, ...; 2025: a plain class with
train_files, val_files and a line that joins DATA_PATH to them).

  - the patch: each flag's field holds its new value, every other field and line is as it was, the
    copy compiles, the diff shows exactly the patched lines; a missing field, a field assigned
    twice, a line that would undo the patch, --seed for a trainer without one, and a flag given
    twice are refused, naming the field, with nothing written;
  - the code above a log's line of 100 '=' comes back byte for byte (with and without a final
    newline), and a file that is neither Python nor such a log is refused;
  - the script: --dry-run writes OUT (the original code, the patched copy, the diff, the command,
    the SHA-256 sums) and prints the torchrun command without running it; an OUT inside the
    repository, one already used or not empty, and bad flags are refused (exit 2) with nothing
    written; with a stand-in nvidia-smi and a stand-in PyTorch (PYTHON_TORCH) that writes a log
    where the trainers do, the run path copies the log and reads it; with no GPU it ends (exit 1)
    before writing OUT;
  - the parser: a stand-in log read into the median and mean step, validations and peak memory
    (exact figures), and hostile logs refused by file and line with no traceback.

    python3 tests/test_record_trainer.py
"""
import ast
import hashlib
import os
import stat
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
from harness import check, finish, no_gpu_env, outcome_problems  # noqa: E402

PATCH = [sys.executable, os.path.join(root, "peer", "record_trainer_patch.py")]
LOGS = [sys.executable, os.path.join(root, "peer", "record_trainer_logs.py")]
SCRIPT = ["bash", os.path.join(root, "peer", "record_trainer.sh")]
SEP = "=" * 100
tmp = tempfile.mkdtemp(prefix="record_trainer_")

# stand-in trainers: the records' field layout, none of their code
T2024 = '''import os
from dataclasses import dataclass

@dataclass
class Hyperparameters:
    # data
    input_bin : str = 'data/fineweb10B/fineweb_train_*.bin' # training shards
    input_val_bin : str = 'data/fineweb10B/fineweb_val_*.bin' # validation shards
    # optimization
    batch_size : int = 8 # sequences
    sequence_length : int = 64*1024 # tokens
    num_iterations : int = 1480 # steps
    warmup_iters : int = 0
    cooldown_iters : int = 600 # steps of cooldown
    weight_decay : float = 0
    # evaluation
    val_loss_every : int = 125 # 0: at the end only
    val_tokens : int = 10485760 # tokens
    save_every : int = 0
args = Hyperparameters()
print("stand-in", args.num_iterations)
'''
T2025 = '''import os
import uuid

class Hyperparameters:
    run_id = f'final/{uuid.uuid4()}'
    train_files = "data/fineweb10B/fineweb_train_*.bin" # training shards
    val_files = "data/fineweb10B/fineweb_val_*.bin" # validation shards
    val_tokens = 10485760 # tokens
    train_seq_len = 48*1024
    num_iterations = 1695 # steps
    cooldown_frac = 0.45
    val_loss_every = 125 # 0: at the end only
    save_checkpoint = False
args = Hyperparameters()

data_path = os.environ.get("DATA_PATH", ".")
args.train_files = os.path.join(data_path, args.train_files)
args.val_files = os.path.join(data_path, args.val_files)
'''


def write(name, text):
    path = os.path.join(tmp, name)
    with open(path, "w", newline="") as f:
        f.write(text)
    return path


def fields(path):
    tree = ast.parse(open(path).read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Hyperparameters")
    out = {}
    for n in cls.body:
        t = n.target if isinstance(n, ast.AnnAssign) else n.targets[0] if isinstance(n, ast.Assign) else None
        if isinstance(t, ast.Name):
            out[t.id] = ast.get_source_segment(open(path).read(), n.value)
    return out


def patch(trainer, *flags, tag):
    orig, new = os.path.join(tmp, f"{tag}_orig.py"), os.path.join(tmp, f"{tag}_new.py")
    r = subprocess.run(PATCH + ["patch", trainer, orig, new, *flags], capture_output=True, text=True, timeout=60)
    return r, orig, new


def refused(r, rc, names, what):
    probs = outcome_problems(r.returncode, r.stdout + r.stderr, (rc,), names, 60)
    check(what, not probs, "; ".join(probs) + f": {r.stderr[-300:]}")


# --- the patch of each layout: new values, nothing else changed, the diff exactly those lines
t24, t25 = write("t2024.py", T2024), write("t2025.py", T2025)
flags = ["--steps", "100", "--val-every", "25", "--val-tokens", "1048576", "--train", "/d/train_*.bin", "--val", "/d/val_*.bin"]
for trainer, tag, names in ((t24, "p24", ("num_iterations", "val_loss_every", "val_tokens", "input_bin", "input_val_bin")),
                            (t25, "p25", ("num_iterations", "val_loss_every", "val_tokens", "train_files", "val_files"))):
    r, orig, new = patch(trainer, *flags, tag=tag)
    check(f"{tag}: patched (exit 0)", r.returncode == 0, r.stderr)
    if r.returncode != 0:
        continue
    want = dict(zip(names, ("100", "25", "1048576", "'/d/train_*.bin'", "'/d/val_*.bin'")))
    before, after = fields(orig), fields(new)
    check(f"{tag}: each patched field holds its new value (exact text)", all(after[k] == v for k, v in want.items()),
          str({k: after[k] for k in want}))
    check(f"{tag}: every other field as it was (exact text)",
          {k: v for k, v in after.items() if k not in want} == {k: v for k, v in before.items() if k not in want})
    check(f"{tag}: the original is the trainer byte for byte", open(orig, "rb").read() == open(trainer, "rb").read())
    a, b = open(orig).read().splitlines(), open(new).read().splitlines()
    changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    check(f"{tag}: exactly 5 lines changed, the same number of lines, comments kept (exact)",
          len(a) == len(b) and len(changed) == 5 and all("#" in b[i] for i in changed), str(changed))
    minus = [ln for ln in r.stdout.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln for ln in r.stdout.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    check(f"{tag}: the diff removes and adds exactly the 5 field lines (exact)",
          minus == ["-" + a[i] for i in changed] and plus == ["+" + b[i] for i in changed], r.stdout)
    c = subprocess.run([sys.executable, "-m", "py_compile", new], capture_output=True, text=True)
    check(f"{tag}: the patched copy compiles (py_compile exit 0)", c.returncode == 0, c.stderr)
    check(f"{tag}: the trainer's lack of a seed is said", "takes no seed" in r.stderr, r.stderr)

r, orig, new = patch(t24, "--field", "cooldown_iters=30", "--field", "weight_decay=0.5", tag="extra")
check("--field: two other fields patched (exact text)", r.returncode == 0 and fields(new)["cooldown_iters"] == "30"
      and fields(new)["weight_decay"] == "0.5", r.stderr)
seeded = write("seeded.py", T2024.replace("    save_every : int = 0\n", "    save_every : int = 0\n    seed : int = 0 # seed\n"))
r, orig, new = patch(seeded, "--seed", "1234", tag="seed")
check("--seed: a trainer with a seed field gets it (exact text)", r.returncode == 0 and fields(new)["seed"] == "1234", r.stderr)

# --- refusals of the patch: the field named, nothing written
cases = [
    ("a missing field", T2024.replace("    val_tokens : int = 10485760 # tokens\n", ""), ["--val-tokens", "65536"], 2, ["val_tokens"]),
    ("a doubled field", T2024.replace("    warmup_iters : int = 0\n", "    num_iterations : int = 5\n"), ["--steps", "9"], 1,
     ["num_iterations", "2 times"]),
    ("an override outside the class", T2024 + "args.num_iterations = 7\n", ["--steps", "9"], 1, ["num_iterations", "line 22"]),
    ("a keyword override", T2024.replace("args = Hyperparameters()", "args = Hyperparameters(val_loss_every=3)"),
     ["--val-every", "9"], 1, ["val_loss_every"]),
    ("--seed without a seed field", T2024, ["--seed", "3"], 2, ["seed", "takes no seed"]),
    ("both 2024 and 2025 names", T2024.replace("    save_every : int = 0\n", "    save_every : int = 0\n    train_files = 'x'\n"),
     ["--train", "/d/t"], 2, ["input_bin", "train_files"]),
    ("--field of no field", T2024, ["--field", "nonesuch=1"], 2, ["nonesuch"]),
    ("--field with no literal", T2024, ["--field", "cooldown_iters=os.getcwd()"], 2, ["cooldown_iters", "literal"]),
    ("a field set by two flags", T2024, ["--steps", "5", "--field", "num_iterations=6"], 2, ["num_iterations"]),
    ("no class Hyperparameters", T2024.replace("class Hyperparameters", "class Settings"), ["--steps", "5"], 1, ["Hyperparameters"]),
    ("a value over two lines", T2024.replace("num_iterations : int = 1480", "num_iterations : int = (1480 +\n        0)"),
     ["--steps", "5"], 1, ["num_iterations", "spans lines"]),
    ("no flag", T2024, [], 2, ["nothing to patch"]),
    ("--steps 0", T2024, ["--steps", "0"], 2, ["--steps"]),
]
for i, (what, text, fl, rc, names) in enumerate(cases):
    trainer = write(f"bad{i}.py", text)
    r, orig, new = patch(trainer, *fl, tag=f"bad{i}")
    refused(r, rc, names, f"patch refused: {what} (exit {rc}, naming {names})")
    check(f"patch refused: {what}: nothing written", not os.path.exists(orig) and not os.path.exists(new))
r, orig, new = patch(t24, "--steps", "5", tag="twice")
r, _, _ = patch(t24, "--steps", "6", tag="twice")
refused(r, 1, ["exists already"], "patch: an existing output file is not overwritten (exit 1)")
check("patch: the existing output keeps its value", fields(new)["num_iterations"] == "5")
# the 2025 layout's own `args.train_files = os.path.join(data_path, args.train_files)` reads the field: allowed
check("the 2025 layout's DATA_PATH join (reads the field) does not block --train", "train_files" in str(fields(os.path.join(tmp, "p25_new.py"))))

# --- the code above a log's line of 100 '='
for tail, name in (("\n", "with a final newline"), ("", "without a final newline")):
    code = T2025.rstrip("\n") + tail
    log = write(f"log_{len(tail)}.txt", code + "\n" + SEP + "\nRunning Python 3\n" + SEP + "\nstep:0/1695 val_loss:10.8258 "
                "train_time:0ms step_avg:0.02ms\n")
    r, orig, new = patch(log, "--steps", "20", tag=f"log{len(tail)}")
    check(f"a log's code {name}: extracted byte for byte (exact) and patched", r.returncode == 0 and
          open(orig, newline="").read() == code and fields(new)["num_iterations"] == "20", r.stderr)
r = subprocess.run(PATCH + ["fields", log], capture_output=True, text=True, timeout=60)
check("fields: a log's trainer read, each setting's field named, no seed said",
      r.returncode == 0 and "--train      train_files" in r.stdout and "--steps      num_iterations" in r.stdout
      and "takes no seed" in r.stdout and "its code, lines 1-" in r.stdout, r.stdout + r.stderr)
for what, text, names in (("a log with nothing above its line", SEP + "\nstep:1/2 train_time:1ms step_avg:1ms\n", ["nothing above"]),
                          ("text that is neither", "hello world\nthis is not python\n", ["line 1"]),
                          ("a log whose top is not Python", "def f(:\n" + SEP + "\n", ["line 1", "code above line 2"])):
    r, orig, new = patch(write("neither.txt", text), "--steps", "5", tag="neither")
    refused(r, 1, names, f"patch refused: {what} (exit 1)")
binary = os.path.join(tmp, "binary.txt")
open(binary, "wb").write(b"\xff\xfe\x00" * 100)
r, _, _ = patch(binary, "--steps", "5", tag="binary")
refused(r, 1, ["not UTF-8"], "patch refused: a binary file (exit 1)")
r, _, _ = patch(tmp, "--steps", "5", tag="dir")
refused(r, 1, ["directory"], "patch refused: a directory (exit 1)")

# --- the script: --dry-run, refusals
data = os.path.join(tmp, "data")
os.makedirs(data)
for n in ("fineweb_train_000001.bin", "fineweb_val_000000.bin"):
    open(os.path.join(data, n), "wb").close()
fake_bin = os.path.join(tmp, "bin")
ENV = no_gpu_env(fake_bin)
GLOBS = ["--train", os.path.join(data, "fineweb_train_*.bin"), "--val", os.path.join(data, "fineweb_val_*.bin")]


def script(*args, env=None):
    return subprocess.run(SCRIPT + list(args), capture_output=True, text=True, timeout=120, env=env or ENV, cwd=tmp)


out = os.path.join(tmp, "out1")
r = script("--trainer", t24, "--out", out, *GLOBS, "--gpus", "2", "--steps", "40", "--val-every", "20", "--dry-run")
check("--dry-run: exit 0 with no GPU", r.returncode == 0, r.stdout + r.stderr)
check("--dry-run: the torchrun command printed, not run",
      "-m torch.distributed.run --standalone --nproc_per_node 2 train_gpt.py" in r.stdout and "not run" in r.stdout
      and not os.path.exists(os.path.join(out, "out.txt")), r.stdout)
check("--dry-run: the diff printed, with both patched values",
      "+    num_iterations : int = 40 # steps" in r.stdout and "+    val_loss_every : int = 20 # 0: at the end only" in r.stdout, r.stdout)
listing = sorted(os.listdir(out)) if os.path.isdir(out) else []
check("--dry-run: OUT holds original.py, run/, patch.diff, command.txt, run_info.txt (exact)",
      listing == ["command.txt", "original.py", "patch.diff", "run", "run_info.txt"], str(listing))
info = open(os.path.join(out, "run_info.txt")).read() if listing else ""
sha = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()  # noqa: E731
check("run_info.txt: the SHA-256 of the trainer's file and of the patched copy (exact)",
      f"sha256 of the trainer's file: {sha(t24)}" in info
      and f"sha256 of the patched code (run/train_gpt.py): {sha(os.path.join(out, 'run', 'train_gpt.py'))}" in info, info)
check("run_info.txt: date, GPUs, fields, no seed, no card", all(s in info for s in (
    "date: 20", "gpus: 2", "field: num_iterations = 40 (--steps)", "takes no seed", "card: none (--dry-run"))
      , info)
check("run/logs/final/ made (the 2025 trainers write there)", os.path.isdir(os.path.join(out, "run", "logs", "final")))
check("the shard patterns made absolute in the copy", fields(os.path.join(out, "run", "train_gpt.py"))["input_bin"]
      == repr(os.path.join(data, "fineweb_train_*.bin")))
rel = script("--trainer", t24, "--out", os.path.join(tmp, "out_rel"), "--train", "data/fineweb_train_*.bin", "--val",
             "data/fineweb_val_*.bin", "--dry-run")
check("relative shard patterns are read from the working folder and written absolute",
      rel.returncode == 0 and fields(os.path.join(tmp, "out_rel", "run", "train_gpt.py"))["input_val_bin"]
      == repr(os.path.join(tmp, "data", "fineweb_val_*.bin")), rel.stderr)

for what, args, names in (
        ("an OUT already used", ["--out", out], ["already holds a run", out]),
        ("an OUT inside the repository", ["--out", os.path.join(root, "never_made")], ["inside the repository"]),
        ("the repository as OUT", ["--out", root], ["inside the repository"]),
        ("an OUT that is not empty", ["--out", data], ["is not empty"]),
        ("an OUT that is a file", ["--out", t25], ["not a folder"]),
        ("an unknown flag", ["--out", os.path.join(tmp, "never"), "--bogus"], ["unknown flag '--bogus'"]),
        ("--gpus 3", ["--out", os.path.join(tmp, "never"), "--gpus", "3"], ["--gpus 3"]),
        ("--gpus 0", ["--out", os.path.join(tmp, "never"), "--gpus", "0"], ["--gpus must be"]),
        ("--steps abc", ["--out", os.path.join(tmp, "never"), "--steps", "abc"], ["--steps must be"]),
        ("--steps twice", ["--out", os.path.join(tmp, "never"), "--steps", "5", "--steps", "6"], ["--steps is given twice"]),
        ("--val-tokens with no value", ["--out", os.path.join(tmp, "never"), "--val-tokens"], ["--val-tokens needs a value"]),
        ("no --out", [], ["--out is required"]),
        ("--seed for a trainer without one", ["--out", os.path.join(tmp, "never"), "--seed", "1"], ["takes no seed"]),
        ("--field of no field", ["--out", os.path.join(tmp, "never"), "--field", "nope=1"], ["nope"])):
    before = sorted(os.listdir(tmp))
    r = script("--trainer", t24, *GLOBS, "--dry-run", *args)  # (a flag with no value comes last)
    refused(r, 2, names, f"script refused: {what} (exit 2, naming {names})")
    check(f"script refused: {what}: nothing written", sorted(os.listdir(tmp)) == before
          and not os.path.exists(os.path.join(root, "never_made")))
for what, args, names in (("no --trainer file", ["--trainer", os.path.join(tmp, "nonesuch.py")], ["nonesuch.py"]),
                          ("a --train pattern matching nothing", ["--trainer", t24, "--train", os.path.join(tmp, "x_*.bin"),
                                                                 "--val", GLOBS[3]], ["--train", "matches no file"])):
    r = script(*args, "--out", os.path.join(tmp, "never"), *([] if "--train" in args else GLOBS), "--dry-run")
    refused(r, 2, names, f"script refused: {what} (exit 2)")
fifo = os.path.join(tmp, "fifo")
os.mkfifo(fifo)
r = script("--trainer", fifo, "--out", os.path.join(tmp, "never"), *GLOBS, "--dry-run")
refused(r, 2, ["fifo", "not a regular file"], "script refused: a FIFO as --trainer (exit 2, not read, no hang)")
r = subprocess.run(LOGS + [fifo], capture_output=True, text=True, timeout=60)
refused(r, 1, ["fifo", "FIFO"], "parser refused: a FIFO as the log (exit 1, not read, no hang)")
r = subprocess.run(PATCH + ["fields", fifo], capture_output=True, text=True, timeout=60)
refused(r, 1, ["fifo", "FIFO"], "patch refused: a FIFO as the trainer (exit 1, not read, no hang)")
doubled = write("doubled.py", T2024.replace("    warmup_iters : int = 0\n", "    num_iterations : int = 5\n"))
r = script("--trainer", doubled, "--out", os.path.join(tmp, "never"), *GLOBS, "--steps", "5", "--dry-run")
refused(r, 1, ["num_iterations", "2 times", "not patched"], "script: a doubled field ends it (exit 1), naming the field")
check("script: a doubled field: OUT not made", not os.path.exists(os.path.join(tmp, "never")))
r = script("--trainer", t24, "--out", os.path.join(tmp, "never"), *GLOBS)
refused(r, 1, ["no GPU"], "script without --dry-run on a machine with no GPU: exit 1, naming it")
check("script with no GPU: OUT not made", not os.path.exists(os.path.join(tmp, "never")))

# --- the run path, with a stand-in nvidia-smi (2 GPUs) and a stand-in PyTorch that writes a log
STEPS = 30
STANDIN_LOG = "".join(["import stand_in\n", SEP, "\n"] +
                      [f"step:{s}/{STEPS} train_time:{1000 + 10 * s if s <= 10 else 100 * (s - 10)}ms step_avg:nanms\n"
                       for s in range(1, STEPS + 1)] +
                      [f"step:{STEPS}/{STEPS} val_loss:3.5000 train_time:2000ms step_avg:100.00ms\n",
                       "peak memory allocated: 1234 MiB reserved: 2345 MiB\n"])
gpu_bin = os.path.join(tmp, "gpu_bin")
os.makedirs(gpu_bin)
with open(os.path.join(gpu_bin, "nvidia-smi"), "w") as f:
    f.write("#!/bin/sh\ncase \"$*\" in *query-gpu*) echo 'Stand-in GPU'; echo 'Stand-in GPU';; "
            "*) echo 'GPU 0: Stand-in GPU (UUID: GPU-0)'; echo 'GPU 1: Stand-in GPU (UUID: GPU-1)';; esac\n")
open(os.path.join(tmp, "standin.log"), "w").write(STANDIN_LOG)
with open(os.path.join(gpu_bin, "fake_torch"), "w") as f:
    f.write("#!/bin/sh\ncase \"$1\" in -c) case \"$2\" in *print*) echo 2.11.0;; esac; exit 0;; esac\n"
            f"echo \"ran: $*\" > ran.txt; cp '{os.path.join(tmp, 'standin.log')}' logs/final/standin-run.txt; echo trained\n")
os.chmod(os.path.join(gpu_bin, "nvidia-smi"), stat.S_IRWXU)
os.chmod(os.path.join(gpu_bin, "fake_torch"), stat.S_IRWXU)
GPU_ENV = dict(ENV, PATH=gpu_bin + os.pathsep + ENV["PATH"], PYTHON_TORCH=os.path.join(gpu_bin, "fake_torch"))
ran = os.path.join(tmp, "ran")
r = script("--trainer", t25, "--out", ran, *GLOBS, "--gpus", "2", "--steps", str(STEPS), env=GPU_ENV)
check("run path: exit 0", r.returncode == 0, r.stdout + r.stderr)
ran_txt = os.path.join(ran, "run", "ran.txt")
check("run path: torchrun's arguments in OUT/run (exact)", os.path.isfile(ran_txt) and open(ran_txt).read().strip()
      == "ran: -m torch.distributed.run --standalone --nproc_per_node 2 train_gpt.py")
check("run path: the trainer's log copied to log.txt (exact)", os.path.isfile(os.path.join(ran, "log.txt"))
      and open(os.path.join(ran, "log.txt")).read() == STANDIN_LOG)
info = open(os.path.join(ran, "run_info.txt")).read() if os.path.isfile(os.path.join(ran, "run_info.txt")) else ""
check("run path: run_info.txt names the cards, PyTorch, the log and the exit status",
      all(s in info for s in ("cards: Stand-in GPU,Stand-in GPU", "pytorch: 2.11.0", "log: run/logs/final/standin-run.txt",
                              "exit status 0")), info)
check("run path: out.txt holds the run's output", "trained" in open(os.path.join(ran, "out.txt")).read())
summary = open(os.path.join(ran, "summary.txt")).read() if os.path.isfile(os.path.join(ran, "summary.txt")) else ""
check("run path: summary.txt: median 100 ms over steps 11-30, peak 1234 MiB (exact)",
      "median step: 100.00 ms over steps 11-30 (20 steps)" in summary and "peak memory: 1234 MiB (reserved 2345 MiB)" in summary,
      summary)

# --- the parser on a stand-in log: the 2024 form (clock set to 0 before step 11, train_loss lines too)
lines = ["code = 1", SEP, "Running Python", SEP, "step:0/40 val_loss:10.8258 train_time:0ms step_avg:nanms"]
t = 0
for s in range(1, 41):
    t = 5000 + s if s <= 10 else t + (150 if s % 2 else 160) if s > 11 else 250
    lines.append(f"step:{s}/40 {'train_loss:4.5000 ' if s == 5 else ''}train_time:{t}ms step_avg:nanms")
    if s in (20, 40):
        lines.append(f"step:{s}/40 val_loss:{4.0 if s == 20 else 3.5:.4f} train_time:{t}ms step_avg:1.00ms")
lines.append("peak memory consumption: 34239 MiB")
good = write("good.txt", "\n".join(lines) + "\n")
r = subprocess.run(LOGS + [good], capture_output=True, text=True, timeout=60)
out_lines = r.stdout.splitlines()
# steps 11..40: step 11 is 250 (the clock restarted at 0), then 160 for even steps (15), 150 for odd (14)
check("parser: complete, median 160 ms over steps 11-40 (30 steps; exact)",
      r.returncode == 0 and "a run of 40 steps, complete" in r.stdout and "median step: 160.00 ms over steps 11-40 (30 steps)" in r.stdout,
      r.stdout + r.stderr)
check("parser: the mean step over 11-40, (250 + 14 x 150 + 15 x 160) / 30 = 158.33 ms (exact to the printed 0.01)",
      "mean step over steps 11-40: 158.33 ms" in r.stdout, r.stdout)
check("parser: final validation, peak memory (exact)", "final validation loss: 3.5000 at step 40" in r.stdout
      and "peak memory: 34239 MiB" in r.stdout, r.stdout)
rows = [ln.split() for ln in out_lines if ln.strip() and ln.split()[0] in ("0", "20", "40")]
check("parser: validations by step, steps 11-20 at (250 + 4 x 150 + 5 x 160) / 10 = 165 ms, 21-40 at 155 ms (exact)",
      rows == [["0", "10.8258", "0", "-", "-"], ["20", "4.0000", str(250 + 4 * 150 + 5 * 160), "11-20", "165.00"],
               ["40", "3.5000", str(250 + 14 * 150 + 15 * 160), "21-40", "155.00"]], str(rows))
r = subprocess.run(LOGS + [good, "--steps", "12-13"], capture_output=True, text=True, timeout=60)
check("parser: --steps 12-13 covers steps 12 (160) and 13 (150): median 155.00 (exact)",
      "median step: 155.00 ms over steps 12-13 (2 steps)" in r.stdout, r.stdout + r.stderr)

# --- hostile logs: refused by file and line, exit 1, no traceback
hostile = [
    ("a malformed step line", "step:1/10 train_time:5ms step_avg:nanms\nstep:2/10 train_time:xyzms step_avg:nanms\n", ":2:"),
    ("a step past the total", "step:11/10 train_time:5ms step_avg:nanms\n", ":1:"),
    ("a step going back (two runs)", "step:1/10 train_time:5ms step_avg:nanms\nstep:2/10 train_time:6ms step_avg:nanms\n"
     "step:1/10 train_time:7ms step_avg:nanms\n", ":3:"),
    ("another total (two runs)", "step:1/10 train_time:5ms step_avg:nanms\nstep:2/20 train_time:6ms step_avg:nanms\n", ":2:"),
    ("a time beyond range", "step:1/10 train_time:99999999999ms step_avg:nanms\n", ":1:"),
    ("a malformed peak-memory line", "step:1/10 train_time:5ms step_avg:nanms\npeak memory consumption: lots\n", ":2:"),
    ("two peak-memory lines", "step:1/10 train_time:5ms step_avg:nanms\npeak memory consumption: 5 MiB\n"
     "peak memory consumption: 6 MiB\n", ":3:"),
    ("a loss that is no number", "step:1/10 val_loss:abc train_time:5ms step_avg:nanms\n", ":1:"),
    ("a huge step line", "step:1/10 " + "9" * 70000 + "\n", ":1:"),
    ("no step line", "hello\n", "no step line"),
    ("an empty file", "", "no step line"),
]
for i, (what, text, where) in enumerate(hostile):
    p = write(f"hostile{i}.txt", text)
    r = subprocess.run(LOGS + [p], capture_output=True, text=True, timeout=60)
    refused(r, 1, [p + where if where.startswith(":") else where], f"parser refused: {what} (exit 1, naming the line)")
gap = write("gap.txt", "\n".join(ln for ln in lines if not ln.startswith("step:15/40 ")) + "\n")
r = subprocess.run(LOGS + [gap], capture_output=True, text=True, timeout=60)
refused(r, 1, ["step 15 is not in the log", "--steps 11-40"], "parser: a step missing from the median's steps is named (exit 1)")
for what, args, names in (("no LOG", [], ["no LOG"]), ("--steps 9-3", [good, "--steps", "9-3"], ["--steps"]),
                          ("--steps past the end", [good, "--steps", "11-41"], ["past the run's last"]),
                          ("an unknown flag", [good, "--bogus"], ["--bogus"]), ("two logs", [good, good], ["one log at a time"])):
    r = subprocess.run(LOGS + args, capture_output=True, text=True, timeout=60)
    refused(r, 2, names, f"parser: {what}: exit 2")
r = subprocess.run(LOGS + [tmp], capture_output=True, text=True, timeout=60)
refused(r, 1, ["directory"], "parser: a directory refused (exit 1)")
finish("record-trainer")
