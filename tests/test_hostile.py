"""Hostile and careless input against every binary and script of the project: each case must end
with exit code 1 or 2 (as the case says), within a bounded time, with a message that names the
file or flag at fault, no signal, no traceback, and nothing already written lost or changed.
Needs no GPU: every case is refused before a GPU would be used. Prints one line per case
(`ok`/`FAIL`, the command, how it ended), so the list of what was tried is the test's output.

    python3 tests/test_hostile.py BUILD_DIR
"""
import glob
import hashlib
import json
import os
import resource
import shlex
import shutil
import stat
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require  # noqa: E402

require("numpy", suite="hostile")
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, digest_tree, finish, outcome_problems  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
TRAIN = os.path.join(ROOT, "train_gpt")
PREPARE = os.path.join(BUILD, "prepare")
TOKENIZE = os.path.join(BUILD, "tokenize")
ATTN_RUN = os.path.join(BUILD, "attn_run")
PY = sys.executable
S = os.path.join(ROOT, "scripts")
T = tempfile.mkdtemp(prefix="hostile_")
LIMIT_S = 60  # any case still running after this has hung
summary = []


def case(name, cmd, want_rc, names, stdin=None, keep=(), fsize=None, stdout_path=None, env=None):
    """Runs cmd; passes when it exits with want_rc (an int or a tuple) in time, its output names
    every string of `names`, holds no traceback, and the files in `keep` are unchanged."""
    before = digest_tree(keep) if keep else None

    def limits():
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.RLIM_INFINITY))

    t0 = time.time()
    out_f = open(stdout_path, "wb") if stdout_path else subprocess.PIPE
    try:
        r = subprocess.run(cmd, input=stdin, stdout=out_f, stderr=subprocess.PIPE, timeout=LIMIT_S, preexec_fn=limits,
                           env=env, cwd=ROOT)
        rc, out = r.returncode, ((r.stdout or b"") + r.stderr).decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        rc, out = "hung", ((e.stdout or b"") + (e.stderr or b"")).decode("utf-8", "replace")
    finally:
        if stdout_path:
            out_f.close()
    el = time.time() - t0
    wants = want_rc if isinstance(want_rc, tuple) else (want_rc,)
    problems = outcome_problems(rc, out, wants, names, LIMIT_S, names_what="the message")
    if keep and digest_tree(keep) != before:
        problems.append("files already written were changed")
    first = next((ln for ln in out.splitlines() if "error" in ln.lower() or "--" in ln or ":" in ln), out.strip()[:160])
    summary.append(f"{name}: exit {rc} in {el:.1f} s: {first.strip()[:150]}")
    check(f"{name} -> exit {rc}" + (f" ({'; '.join(problems)})" if problems else ""), not problems,
          f"$ {shlex.join(str(c) for c in cmd)}\n{out[-1500:]}")
    return rc, out


def path(*p):
    return os.path.join(T, *p)


def write_shard(p, tokens, magic=20240520, version=1, count=None):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [magic, version, len(tokens) if count is None else count]
    with open(p, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())
    return p


def set_header_word(p, i, v):
    """Sets int32 word i of a shard's header to v, in place."""
    with open(p, "r+b") as f:
        f.seek(4 * i)
        f.write(struct.pack("<i", v))


def fifo(p):
    os.mkfifo(p)
    return p


# ------------------------------------------------------------------------------------ fixtures
rng = np.random.default_rng(11)
docs = []
for i in range(6):
    p = path(f"doc{i}.txt")
    open(p, "w").write(("Some words of document %d. " % i) * 200)
    docs.append(p)
# names that a shell would read as code, or that break quoting: legal paths, to be taken literally
odd_dir = path("it's a $(touch PWNED) dir")
os.makedirs(odd_dir)
odd_doc = os.path.join(odd_dir, "doc 'one'.txt")
shutil.copy(docs[0], odd_doc)
GOOD = path("good")  # a good shard folder written by prepare (with its manifest)
r = subprocess.run([PREPARE, "--text", *docs, "--out-dir", GOOD, "--name", "toy", "--shard-tokens", "4096", "--no-shuffle"],
                   capture_output=True, text=True, cwd=ROOT)
check("fixture: prepare writes a good shard folder", r.returncode == 0, r.stderr)
GOOD_TRAIN, GOOD_VAL = os.path.join(GOOD, "toy_train_*.bin"), os.path.join(GOOD, "toy_val_*.bin")
DATA = ["--train-data", GOOD_TRAIN, "--val-data", GOOD_VAL, "--seq-len", "64", "--val-tokens", "64"]
BAD = path("bad")
os.makedirs(BAD)
good_tokens = rng.integers(0, 50256, size=5000)
good_tokens[::300] = 50256
shards = {
    "truncated": (write_shard(path("bad", "truncated.bin"), good_tokens), lambda p: os.truncate(p, 3000), "truncated"),
    "bad magic": (write_shard(path("bad", "magic.bin"), good_tokens, magic=7), None, "bad magic 7"),
    "bad version": (write_shard(path("bad", "version.bin"), good_tokens, version=9), None, "unsupported version 9"),
    "id out of range": (write_shard(path("bad", "range.bin"), np.r_[good_tokens, 60000]), None, "token id 60000"),
    "huge count": (write_shard(path("bad", "huge.bin"), good_tokens, count=2**31 - 1), None, "header says"),
    "negative count": (write_shard(path("bad", "neg.bin"), good_tokens, count=-5), None, "negative token count"),
    "empty file": (path("bad", "empty.bin"), lambda p: open(p, "wb").close(), "shorter than"),
    "text file": (path("bad", "text.bin"), lambda p: open(p, "w").write("hello world\n" * 200), "bad magic"),
    # a word past the count that is not 0: a file of these tokens with another SHA-256
    "header word 3 set": (write_shard(path("bad", "word3.bin"), good_tokens), lambda p: set_header_word(p, 3, 1), "header word 3 is 1"),
    "header word 255 set": (write_shard(path("bad", "word255.bin"), good_tokens), lambda p: set_header_word(p, 255, -7),
                            "header word 255 is -7"),
}
for name, (p, mutate, _) in shards.items():
    if mutate:
        mutate(p)
FIFO_SHARD = fifo(path("bad", "pipe.bin"))
DIR_SHARD = path("bad", "folder.bin")
os.makedirs(DIR_SHARD)
EXISTING_LOG = path("old_run.txt")
open(EXISTING_LOG, "w").write("run_id:1234 train_gpt x\nstep:0/10 val_loss:5.0 train_time:0ms step_avg:nanms\n")
CKPT_USED = path("ckpts")
os.makedirs(CKPT_USED)
open(os.path.join(CKPT_USED, "ckpt_000010.bin"), "wb").write(b"TGPTCKPT" + b"\0" * 64)
A_FILE = path("a_file")
open(A_FILE, "w").write("not a folder\n")


def ckpt_bytes(count, data=b""):
    b = b"TGPTCKPT" + struct.pack("<IQ", 1, 1) + b"x" + struct.pack("<qqIIs", 1, 1, 1, 1, b"m") + struct.pack("<Q", count)
    return b + data


ckpts = {
    "claims a 2 TiB blob": (ckpt_bytes(2**39), "left in the file"),
    "truncated": (ckpt_bytes(100, b"\0" * 40), "left in the file"),
    "not a checkpoint": (b"hello world, this is not a checkpoint", "not a train_gpt checkpoint"),
    "empty": (b"", "truncated"),
}
for name, (b, _) in ckpts.items():
    open(path("ck_" + name.replace(" ", "_") + ".bin"), "wb").write(b)
FIFO_CKPT = fifo(path("pipe.ckpt"))

# ------------------------------------------------------------------------------------ train_gpt: flags
flag_cases = [
    ("--steps 0", ["--steps", "0"], "--steps"),
    ("--steps -1", ["--steps", "-1"], "--steps"),
    ("--steps 0x10 (hex)", ["--steps", "0x10"], "--steps"),
    ("--steps 1e3", ["--steps", "1e3"], "--steps"),
    ("--steps 5abc", ["--steps", "5abc"], "--steps"),
    ("--steps ''", ["--steps", ""], "--steps"),
    ("--steps ' 5'", ["--steps", " 5"], "--steps"),
    ("--steps beyond int64", ["--steps", "99999999999999999999999"], "--steps"),
    ("--seed -1 (unsigned)", ["--seed", "-1"], "--seed"),
    ("--seed 2^64", ["--seed", "18446744073709551616"], "--seed"),
    ("--seed 1.5", ["--seed", "1.5"], "--seed"),
    ("--timeout nan", ["--timeout", "nan"], "--timeout"),
    ("--timeout inf", ["--timeout", "inf"], "--timeout"),
    ("--timeout -inf", ["--timeout", "-inf"], "--timeout"),
    ("--timeout 1e400", ["--timeout", "1e400"], "--timeout"),
    ("--timeout 0", ["--timeout", "0"], "--timeout"),
    ("--timeout abc", ["--timeout", "abc"], "--timeout"),
    ("--vocab-size 0", ["--vocab-size", "0"], "--vocab-size"),
    ("--vocab-size 70000", ["--vocab-size", "70000"], "--vocab-size"),
    ("--preset=nope", ["--preset=nope"], "nope"),
    ("--preset nope", ["--preset", "nope"], "nope"),
    ("--preset without a value", ["--preset"], "--preset"),
    ("--window-mask sideways", ["--window-mask", "sideways"], "--window-mask"),
    ("--window-granularity page", ["--window-granularity", "page"], "--window-granularity"),
    ("--causal 2", ["--causal", "2"], "--causal"),
    ("--doc-mask -1", ["--doc-mask", "-1"], "--doc-mask"),
    ("--prefix-tokens -1", ["--prefix-tokens", "-1"], "--prefix-tokens"),
    ("--prefix-tokens without causal", ["--prefix-tokens", "64", "--causal", "0"], "--prefix-tokens"),
    ("--prefix-tokens as long as the sequence", ["--prefix-tokens", "8192"], "--seq-len"),
    ("--prefix-attention 0 without a prefix", ["--prefix-attention", "0"], "--prefix-tokens"),
    ("--prefix-attention 2", ["--prefix-tokens", "64", "--prefix-attention", "2"], "--prefix-attention"),
    ("--layers 3 (odd)", ["--layers", "3"], "--layers"),
    ("--heads 3 (head size)", ["--heads", "3"], "--heads"),
    ("--width 100 (head size)", ["--width", "100"], "--heads"),
    ("--seq-len 0", ["--seq-len", "0"], "--seq-len"),
    ("--val-tokens 0", ["--val-tokens", "0"], "--val-tokens"),
    ("--val-tokens 2^41", ["--val-tokens", str(2**41)], "--val-tokens"),
    ("--window-blocks -1", ["--window-blocks", "-1"], "--window-blocks"),
    ("--checkpoint-every 5 without a folder", ["--checkpoint-every", "5"], "--checkpoint-dir"),
    ("--checkpoint-every -1", ["--checkpoint-every", "-1"], "--checkpoint-every"),
    ("--profile -3", ["--profile", "-3"], "--profile"),
    ("--grad-sync sometimes", ["--grad-sync", "sometimes"], "--grad-sync"),
    ("--grad-exchange fp8", ["--grad-exchange", "fp8"], "--grad-exchange"),
    ("--gather-wait never", ["--gather-wait", "never"], "--gather-wait"),
    ("--gather-engine dma", ["--gather-engine", "dma"], "--gather-engine"),
    ("--fault 1:2:explode", ["--fault", "1:2:explode"], "--fault"),
    ("--fault garbage", ["--fault", "garbage"], "--fault"),
    ("an unknown flag", ["--no-such-flag"], "--no-such-flag"),
    ("a stray argument", ["stray"], "stray"),
    ("--check-data with --log-file", ["--check-data", "--log-file", path("x.txt")], "--check-data"),
    ("--check-data with --resume", ["--check-data", "--resume", path("x.ckpt")], "--check-data"),
    ("--log-file into a missing folder", ["--log-file", path("no", "such", "log.txt")] + DATA, "--log-file"),
    ("--log-file that is a folder", ["--log-file", T + "/"] + DATA, "--log-file"),
    # an empty value ('', a variable that expanded to nothing) names nothing: refused, where
    # --resume '' started afresh and --checkpoint-dir '' or --log-file '' wrote nothing
    ("--resume ''", ["--resume", ""] + DATA, "--resume: an empty value names nothing"),
    ("--resume=''", ["--resume="] + DATA, "--resume: an empty value names nothing"),
    ("--checkpoint-dir ''", ["--checkpoint-dir", ""] + DATA, "--checkpoint-dir: an empty value names nothing"),
    ("--log-file ''", ["--log-file", ""] + DATA, "--log-file: an empty value names nothing"),
    ("--train-data ''", ["--train-data", ""], "--train-data: an empty value names nothing"),
    ("--window-mask ''", ["--window-mask", ""], "--window-mask: an empty value names nothing"),
]
for name, flags, named in flag_cases:
    case(f"train_gpt {name}", [TRAIN, *flags], 2, [named])
case("train_gpt --val-tokens 2^40 on small data: refused before anything that size is allocated",
     [TRAIN, *DATA[:-2], "--val-tokens", str(2**40)], 2, ["--val-tokens"])
case("train_gpt --log-file of an earlier run: refused, the log untouched",
     [TRAIN, *DATA, "--log-file", EXISTING_LOG], 2, ["--log-file", "old_run.txt"], keep=[EXISTING_LOG])
open(path("old_run2.jsonl"), "w").write("{}\n")
case("train_gpt --log-file whose .jsonl exists: refused", [TRAIN, *DATA, "--log-file", path("old_run2.txt")], 2,
     ["old_run2.jsonl"], keep=[path("old_run2.jsonl")])
case("train_gpt --checkpoint-dir holding another run's checkpoints: refused, untouched",
     [TRAIN, *DATA, "--checkpoint-dir", CKPT_USED], 2, ["--checkpoint-dir", "ckpts"], keep=[CKPT_USED])
case("train_gpt --checkpoint-dir that is a file", [TRAIN, *DATA, "--checkpoint-dir", A_FILE], 2, ["--checkpoint-dir"],
     keep=[A_FILE])

# ------------------------------------------------------------------------------------ train_gpt: recipes (--recipe, --print-recipe, --print-schema)
# a recipe file is read only when it is a regular file of at most 1 MiB (a FIFO would hang the
# read, /dev/zero would fill the memory); --recipe given twice or empty is refused as --recipe;
# a string value names a path or a choice: an empty one or one holding NUL (which would cut the
# path short without a word) is refused naming the key; what --print-recipe, --print-schema and
# --help print is written or the run ends with exit 1 (a full disk is no success)
TINY_RECIPE = open(os.path.join(ROOT, "recipes", "tiny.toml")).read()


def recipe_file(name, body):
    p = path(name)
    open(p, "wb" if isinstance(body, bytes) else "w").write(body)
    return p


RECIPE_CASES = [
    ("a FIFO", [fifo(path("recipe.fifo"))], ["recipe.fifo", "FIFO"]),
    ("/dev/zero", ["/dev/zero"], ["/dev/zero", "not a regular file"]),
    ("larger than 1 MiB", [recipe_file("big.toml", TINY_RECIPE + "#" * (2 << 20) + "\n")], ["big.toml", "larger than 1 MiB"]),
    ("given twice", [recipe_file("r1.toml", TINY_RECIPE), "--recipe", recipe_file("r2.toml", TINY_RECIPE)], ["--recipe:"]),
    ("empty", [""], ["--recipe", "empty"]),
    ("with data.train holding NUL", [recipe_file("nul.toml", TINY_RECIPE.replace('train = "', 'train = "a\\u0000b', 1))],
     ["nul.toml", "data.train", "NUL"]),
    ("with data.train empty", [recipe_file("empty_train.toml", TINY_RECIPE.replace('\ntrain = "', '\ntrain = "" # "', 1))],
     ["empty_train.toml", "data.train", "empty"]),
    ("of UTF-16", [recipe_file("u16.toml", TINY_RECIPE.encode("utf-16"))], ["u16.toml", "utf-8"]),
    ("with a table given twice", [recipe_file("dup.toml", TINY_RECIPE + "\n[model]\nlayers = 4\n")], ["dup.toml", "model"]),
    ("nested 100000 deep", [recipe_file("deep.toml", TINY_RECIPE + "x = " + "[" * 100000 + "]" * 100000 + "\n")],
     ["deep.toml", "nested"]),
    ("with a key of 100000 numbers", [recipe_file("arr.toml", TINY_RECIPE.replace("\nlayers = ", "\nlayers = [" + "4, " * 10 ** 5 + "4]  # ", 1))],
     ["arr.toml", "model.layers", "array"]),
]
for name, value, names in RECIPE_CASES:
    case(f"train_gpt --recipe {name}", [TRAIN, "--recipe", *value, "--print-recipe"], 2, names)
LONG_CHOICE = recipe_file("long_choice.toml", TINY_RECIPE.replace('window_mask = "', 'window_mask = "' + "u" * 500000, 1))
rc, out = case("train_gpt --recipe with a 500 KB window_mask: refused naming the key", [TRAIN, "--recipe", LONG_CHOICE, "--print-recipe"],
               2, ["attention.window_mask"])
check(f"train_gpt --recipe with a 500 KB window_mask: the message is short ({len(out)} characters; bound 2000)", len(out) < 2000)
rc, out = case("train_gpt --recipe R --steps 7: the flag over the recipe's key", [TRAIN, "--recipe", recipe_file("r3.toml", TINY_RECIPE),
                                                                                   "--steps", "7", "--print-recipe"], 0, ["steps = 7"])
case("train_gpt --print-recipe --print-schema: give one", [TRAIN, "--print-recipe", "--print-schema"], 2, ["--print-recipe", "--print-schema"])
for flag in ("--print-recipe", "--print-schema", "--help"):
    case(f"train_gpt {flag}, standard output on a full disk", [TRAIN, flag], 1, ["standard output"], stdout_path="/dev/full")

# ------------------------------------------------------------------------------------ record scripts, resume_check, full_run_logs: arguments
# the record scripts refuse bad arguments before they make a record or build anything (run from
# a copy of scripts/, so that no record is made in this checkout): a TAG begins with a letter or
# digit, a count is a short decimal (bash's test would print its own error on a longer one), a
# TRAINER is a file
REC_TREE = path("rec_tree")
os.makedirs(os.path.join(REC_TREE, "scripts"))
for f in ("record_test_gpu.sh", "record_default_job.sh", "record_bench_matmul.sh"):
    shutil.copy(os.path.join(S, f), os.path.join(REC_TREE, "scripts", f))
REC_CASES = [
    ("record_default_job.sh a folder as TRAINER", ["record_default_job.sh", "1", "h100", T], 1, [T, "not a file"]),
    ("record_default_job.sh TAG '--'", ["record_default_job.sh", "1", "--"], 2, ["TAG"]),
    ("record_default_job.sh N of 20 digits", ["record_default_job.sh", "9" * 20, "h100"], 2, ["N must be 1 to 100"]),
    ("record_test_gpu.sh P of 20 digits", ["record_test_gpu.sh", "h100", "9" * 20], 2, ["P must be 1 to 16"]),
    ("record_test_gpu.sh TAG '-'", ["record_test_gpu.sh", "-"], 2, ["TAG"]),
    ("record_bench_matmul.sh TAG '--'", ["record_bench_matmul.sh", "1", "--", "a=/bin/true"], 2, ["TAG"]),
    ("record_bench_matmul.sh R of 20 digits", ["record_bench_matmul.sh", "9" * 20, "h100", "a=/bin/true"], 2, ["R must be 1 to 100"]),
]
for name, (script, *args), rc, names in REC_CASES:
    r_rc, r_out = case(name, ["bash", os.path.join(REC_TREE, "scripts", script), *args], rc, names)
    check(f"{name}: one line of message, none of bash's own", len(r_out.strip().splitlines()) == 1 and "expression" not in r_out, r_out)
check("record scripts' refusals: no record made", not os.path.exists(os.path.join(REC_TREE, "results")),
      str(list(os.walk(os.path.join(REC_TREE, "results")))))
# resume_check: every token a --flag (a name after the dashes) or a value
RC_LOG = path("rc_run.txt")
subprocess.run([PY, os.path.join(ROOT, "tests", "fake_trainer.py"), "--steps", "20", "--seed", "1000", "--log-file", RC_LOG],
               capture_output=True, timeout=60, cwd=T)
case("resume_check a good log and its flags: the run asked for", [PY, os.path.join(S, "resume_check.py"), RC_LOG, "1000", "train_gpt",
                                                                  "--steps", "20"], 0, [])
# a flag given twice is refused by train_gpt (CLI11: at most once): the log is not "the run asked
# for" by a command that cannot run, whichever value it records
for order in (("30", "20"), ("20", "30")):
    case(f"resume_check with --steps {order[0]} --steps {order[1]}", [PY, os.path.join(S, "resume_check.py"), RC_LOG, "1000", "train_gpt",
                                                                      "--steps", order[0], "--steps", order[1]], 2, ["--steps", "twice"])
case("resume_check with the flag '--=x'", [PY, os.path.join(S, "resume_check.py"), RC_LOG, "1000", "train_gpt", "--=x"], 2, ["'--=x'"])
# full_run_logs: GPUS and STEPS are ASCII decimals; the configuration's numbers are read through
# the checked reader (true is no GPU count)
FR_LOGS = [PY, os.path.join(ROOT, "peer", "full_run_logs.py")]
FR_DIR = path("fr_types")
os.makedirs(FR_DIR)
for what, arg in (("GPUS '²'", ["²", "20"]), ("GPUS '١' (an Arabic-Indic one)", ["١", "20"]), ("STEPS '²0'", ["1", "²0"])):
    case(f"full_run_logs check, {what}", FR_LOGS + ["check", FR_DIR, *arg, "x"], 2, [what.split()[0]])
with open(os.path.join(FR_DIR, "train_gpt_g1.jsonl"), "w") as f:
    f.write('{"event": "config", "world_size": true, "steps": 20, "train_data": "x"}\n'
            '{"event": "val", "step": 20, "train_time_ms": 1000, "val_loss": 3.3}\n{"event": "summary", "peak_memory_mib": 100}\n')
for mode in ("check", "table"):  # a file of bad numbers: exit 1 (check's exit 2 is another run's log)
    case(f"full_run_logs {mode}, a configuration whose world_size is true", FR_LOGS + [mode, FR_DIR, "1", "20", "x"], 1,
         ["train_gpt_g1.jsonl", "world_size"])

# ------------------------------------------------------------------------------------ train_gpt: files
for name, (p, _, msg) in shards.items():
    case(f"train_gpt --check-data, shard {name}", [TRAIN, "--check-data", "--train-data", p, "--val-data", GOOD_VAL], 1,
         [os.path.basename(p), msg])
    case(f"train_gpt training on a shard {name}", [TRAIN, "--train-data", p, "--val-data", GOOD_VAL, "--seq-len", "64",
                                                  "--val-tokens", "64"], 1, [os.path.basename(p)])
# the Python tools that read shards refuse every shard train_gpt refuses, in its words
# (scripts/shard_format.py), naming the file: a header word 3 to 255 that is not 0 included
PEER = [PY, os.path.join(ROOT, "peer", "torch_peer.py")]
RB = [PY, os.path.join(S, "rank_balance.py")]
FF = [PY, os.path.join(S, "fetch_fineweb.py")]
FF_BAD = path("ff_bad")  # a folder of one local FineWeb shard: the bad one, which stays until a good one arrives
for name, (p, _, msg) in shards.items():
    case(f"torch_peer training on a shard {name}", PEER + ["--train-data", p, "--val-data", GOOD_VAL, "--seq-len", "128",
                                                          "--val-tokens", "128"], 1, [os.path.basename(p), msg])
    case(f"rank_balance on a shard {name}", RB + [p], 1, [os.path.basename(p), msg])
    if name == "id out of range":  # (fetch_fineweb checks the header only: the ids are train_gpt's to check)
        continue
    shutil.rmtree(FF_BAD, ignore_errors=True)
    os.makedirs(FF_BAD)
    local = shutil.copy(p, os.path.join(FF_BAD, "fineweb_val_000000.bin"))
    case(f"fetch_fineweb with a local shard {name}: named, kept until its replacement arrives",
         FF + ["0", "--out-dir", FF_BAD, "--base-url", "http://127.0.0.1:9/none", "--timeout", "5"], 1,
         [os.path.basename(local), msg, "offline"], keep=[local])
case("train_gpt --check-data, a FIFO among the shards", [TRAIN, "--check-data", "--train-data", path("bad", "pipe*.bin"),
                                                         "--val-data", GOOD_VAL], 1, ["pipe.bin", "FIFO"])
case("train_gpt training, a FIFO as the shard", [TRAIN, "--train-data", FIFO_SHARD, "--val-data", GOOD_VAL], 1, ["pipe.bin"])
case("train_gpt --check-data, a folder matching the pattern", [TRAIN, "--check-data", "--train-data", DIR_SHARD,
                                                               "--val-data", GOOD_VAL], 1, ["folder.bin", "directory"])
case("train_gpt --check-data, a pattern matching nothing", [TRAIN, "--check-data", "--train-data", path("nothing_*.bin"),
                                                            "--val-data", GOOD_VAL], 1, ["nothing_*.bin", "--train-data"])
for name, (b, msg) in ckpts.items():
    p = path("ck_" + name.replace(" ", "_") + ".bin")
    case(f"train_gpt --resume, checkpoint {name}", [TRAIN, *DATA, "--resume", p], 1, [os.path.basename(p), msg], keep=[p])
case("train_gpt --resume a FIFO", [TRAIN, *DATA, "--resume", FIFO_CKPT], 1, ["pipe.ckpt", "FIFO"])
case("train_gpt --resume a folder", [TRAIN, *DATA, "--resume", T], 1, [T, "directory"])
case("train_gpt --resume a missing file", [TRAIN, *DATA, "--resume", path("missing.ckpt")], 1, ["missing.ckpt"])
# a shard copied in beside a prepared set: the manifest names it
shutil.copy(os.path.join(GOOD, "toy_train_000001.bin"), os.path.join(GOOD, "toy_train_000077.bin"))
case("train_gpt --check-data, a foreign shard among prepared ones", [TRAIN, "--check-data", "--train-data", GOOD_TRAIN,
                                                                      "--val-data", GOOD_VAL], 1, ["toy_train_000077.bin"])
case("train_gpt training, a foreign shard among prepared ones", [TRAIN, *DATA], 1, ["toy_train_000077.bin", "not listed"])
os.remove(os.path.join(GOOD, "toy_train_000077.bin"))
good_copy = path("good_changed")
shutil.copytree(GOOD, good_copy)
with open(os.path.join(good_copy, "toy_train_000001.bin"), "r+b") as f:
    f.seek(2000)
    f.write(b"\x01\x00")
case("train_gpt --check-data, a prepared shard changed after it was written", [TRAIN, "--check-data", "--train-data",
     os.path.join(good_copy, "toy_train_*.bin"), "--val-data", GOOD_VAL], 1, ["toy_train_000001.bin", "SHA-256"])
# the manifest's digests are hex of either case (uppercase is the same digest); a field that is
# not 64 hex digits is refused naming the manifest, its line and the field
for name, edit, want_rc, names in [
    ("uppercase SHA-256 digests: read as the same digests", lambda line: line[:-64] + line[-64:].upper(), 0, ["all shards good"]),
    ("a SHA-256 field that is not hex", lambda line: line[:-64] + "g" * 64, 1, ["manifest.tsv:3: field sha256 'ggg", "not 64 hex digits"]),
]:
    edited = path("good_manifest_" + str(want_rc))
    shutil.copytree(GOOD, edited)
    lines = open(os.path.join(edited, "manifest.tsv")).read().splitlines()
    lines[2] = edit(lines[2])
    open(os.path.join(edited, "manifest.tsv"), "w").write("\n".join(lines) + "\n")
    case(f"train_gpt --check-data, a manifest with {name}", [TRAIN, "--check-data", "--train-data",
         os.path.join(edited, "toy_train_*.bin"), "--val-data", os.path.join(edited, "toy_val_*.bin")], want_rc, names)
# paths that a shell would misread are taken literally
odd_shards = os.path.join(odd_dir, "shards")
r = subprocess.run([PREPARE, "--text", odd_doc, *docs[1:], "--out-dir", odd_shards, "--name", "o", "--shard-tokens", "4096"],
                   capture_output=True, text=True, cwd=ROOT)
check("prepare with quotes, spaces and $(...) in its paths: works, runs no command",
      r.returncode == 0 and not os.path.exists(os.path.join(ROOT, "PWNED")) and not os.path.exists("PWNED"), r.stderr)
r = subprocess.run([TRAIN, "--check-data", "--train-data", os.path.join(odd_shards, "o_train_*.bin"), "--val-data",
                    os.path.join(odd_shards, "o_val_*.bin")], capture_output=True, text=True, cwd=ROOT)
check("train_gpt --check-data on those paths: all good", r.returncode == 0 and "all shards good" in r.stdout, r.stdout + r.stderr)

# ------------------------------------------------------------------------------------ prepare
for name, flags, named in [
    ("--shard-tokens 1", ["--shard-tokens", "1"], "--shard-tokens"),
    ("--shard-tokens 0", ["--shard-tokens", "0"], "--shard-tokens"),
    ("--shard-tokens -5", ["--shard-tokens", "-5"], "--shard-tokens"),
    ("--shard-tokens 2^40", ["--shard-tokens", str(2**40)], "--shard-tokens"),
    ("--shard-tokens abc", ["--shard-tokens", "abc"], "--shard-tokens"),
    ("--threads 100000", ["--threads", "100000"], "--threads"),
    ("--threads -1", ["--threads", "-1"], "--threads"),
    ("--seed -1", ["--seed", "-1"], "--seed"),
    ("--seed 010 is decimal, 08 too", ["--seed", "08", "--bogus"], "--bogus"),
    ("--name with a slash", ["--name", "a/b"], "--name"),
    ("--name empty", ["--name", ""], "--name"),
    ("--name hidden", ["--name", ".x"], "--name"),
    ("--name with a newline", ["--name", "a\nb"], "--name"),
    ("--name with a tab", ["--name", "a\tb"], "--name"),
    ("--name with a carriage return", ["--name", "ab\r"], "--name"),
    ("--name with a space", ["--name", "a b"], "--name"),
    ("--name with a glob character", ["--name", "a*"], "--name"),
    ("--name with a backslash", ["--name", "a\\b"], "--name"),
    ("--name starting with '-'", ["--name=-x"], "--name"),
    ("--name of 300 characters", ["--name", "n" * 300], "--name"),
    ("--name with an escape character", ["--name", "a\x1b[31mb"], "--name"),
    ("an unknown flag", ["--frobnicate"], "--frobnicate"),
]:
    case(f"prepare {name}", [PREPARE, "--text", docs[0], "--out-dir", path("p_" + str(abs(hash(name)))), *flags], 2, [named])
# one document given twice (the same file, or a copy under another name: known by its SHA-256)
# could be shuffled into the validation shard and a training shard both: refused naming both
shutil.copy(docs[0], path("doc_copy.txt"))
for what, texts, named in (("the same --text file twice", [docs[0], docs[1], docs[0]], os.path.basename(docs[0])),
                           ("a copy of a --text file", [docs[0], docs[1], path("doc_copy.txt")], "doc_copy.txt")):
    case(f"prepare {what}: refused naming both", [PREPARE, "--text", *texts, "--out-dir", path("p_twice")], 1,
         [os.path.basename(docs[0]), named, "SHA-256"])
check("prepare refusals of a document given twice: no shard folder", not os.path.exists(path("p_twice")))
case("prepare into a used folder: refused, the old shards untouched", [PREPARE, "--text", docs[0], "--out-dir", GOOD,
     "--name", "toy"], 2, ["--out-dir", "not empty"], keep=[GOOD])
case("prepare --out-dir that is a file", [PREPARE, "--text", docs[0], "--out-dir", A_FILE], 2, ["--out-dir"], keep=[A_FILE])
case("prepare --out-dir /", [PREPARE, "--text", docs[0], "--out-dir", "/"], 2, ["--out-dir"])
case("prepare --out-dir .", [PREPARE, "--text", docs[0], "--out-dir", "."], 2, ["--out-dir"])
case("prepare --text a FIFO", [PREPARE, "--text", fifo(path("text.fifo")), "--out-dir", path("p_fifo")], 1, ["text.fifo", "FIFO"])
case("prepare --text a folder", [PREPARE, "--text", T, "--out-dir", path("p_dir")], 1, [T, "directory"])
case("prepare --text a missing file", [PREPARE, "--text", path("nope.txt"), "--out-dir", path("p_miss")], 1, ["nope.txt"])
vocab_bad = path("vocab_bad")
os.makedirs(vocab_bad)
shutil.copy(os.path.join(ROOT, "data/gpt2/vocab.bpe"), vocab_bad)
enc = bytearray(open(os.path.join(ROOT, "data/gpt2/encoder.json"), "rb").read())
enc[100] ^= 1
open(os.path.join(vocab_bad, "encoder.json"), "wb").write(bytes(enc))
case("prepare --vocab-dir with a changed encoder.json", [PREPARE, "--text", docs[0], "--out-dir", path("p_v1"), "--vocab-dir",
     vocab_bad], 1, ["encoder.json", "SHA-256"])
case("prepare --vocab-dir missing", [PREPARE, "--text", docs[0], "--out-dir", path("p_v2"), "--vocab-dir", path("novocab")], 1,
     ["encoder.json"])
vocab_fifo = path("vocab_fifo")
os.makedirs(vocab_fifo)
fifo(os.path.join(vocab_fifo, "encoder.json"))
case("prepare --vocab-dir whose encoder.json is a FIFO", [PREPARE, "--text", docs[0], "--out-dir", path("p_v3"), "--vocab-dir",
     vocab_fifo], 1, ["encoder.json", "FIFO"])
gc_bad = path("gcide_bad")
os.makedirs(gc_bad)
open(os.path.join(gc_bad, "gcide.index"), "w").write("word\tnot*base64\tB\n")
open(os.path.join(gc_bad, "gcide.dict.dz"), "wb").write(b"not gzip at all")
case("prepare --gcide-dir with a corrupt index", [PREPARE, "--gcide-dir", gc_bad, "--out-dir", path("p_g1")], 1, ["gcide.index"])
case("prepare --gcide-dir missing", [PREPARE, "--gcide-dir", path("nogcide"), "--out-dir", path("p_g2")], 1, ["gcide.index"])
gc_fifo = path("gcide_fifo")
os.makedirs(gc_fifo)
fifo(os.path.join(gc_fifo, "gcide.index"))
case("prepare --gcide-dir with a FIFO index", [PREPARE, "--gcide-dir", gc_fifo, "--out-dir", path("p_g3")], 1, ["gcide.index", "FIFO"])
big = [path("big%d.txt" % i) for i in range(3)]
for p in big:
    open(p, "w").write(f"word{big.index(p)} " * 200000)  # three documents: one given twice is refused
case("prepare on a full disk (file size limit): an error, no shard folder left", [PREPARE, "--text", *big, "--out-dir",
     path("p_full"), "--shard-tokens", "100000"], 1, ["write failed"], fsize=100000)
check("prepare on a full disk: neither the folder nor a staging folder is left",
      not os.path.exists(path("p_full")) and not [n for n in os.listdir(T) if n.startswith(".p_full")], str(os.listdir(T)))
r = subprocess.run([PREPARE, "--text", docs[0], "--out-dir", path("p_ok"), "--shard-tokens", "64", "--no-shuffle"],
                   capture_output=True, text=True, cwd=ROOT)
ok_names = sorted((n for n in os.listdir(path("p_ok")) if n.endswith(".bin")), key=lambda n: int(n[-10:-4]))  # by shard index
sizes = [os.path.getsize(os.path.join(path("p_ok"), n)) for n in ok_names]
check("prepare --shard-tokens 64: every shard but the last holds exactly 64 tokens",
      r.returncode == 0 and len(sizes) > 2 and all(s == 1024 + 128 for s in sizes[:-1]) and sizes[-1] <= 1024 + 128, str(sizes[:5]))

# ------------------------------------------------------------------------------------ tokenize
case("tokenize a FIFO", [TOKENIZE, fifo(path("tok.fifo"))], 1, ["tok.fifo", "FIFO"])
case("tokenize a folder", [TOKENIZE, T], 1, ["directory"])
case("tokenize a missing file", [TOKENIZE, path("nope")], 1, ["nope"])
case("tokenize with no input", [TOKENIZE], 2, ["FILE"])
case("tokenize --hex and a FILE", [TOKENIZE, "--hex", docs[0]], 2, ["--hex"])
case("tokenize --bench --hex", [TOKENIZE, "--bench", "--hex"], 2, ["--bench"], stdin=b"")
case("tokenize --hex, odd length", [TOKENIZE, "--hex"], 1, ["line 2", "odd"], stdin=b"6869\nabc\n")
case("tokenize --hex, not hex", [TOKENIZE, "--hex"], 1, ["line 1", "hex digit"], stdin=b"zz\n")
case("tokenize --hex, a space inside", [TOKENIZE, "--hex"], 1, ["line 1"], stdin=b"68 69\n")
case("tokenize --vocab-dir with a changed encoder.json", [TOKENIZE, "--vocab-dir", vocab_bad, docs[0]], 1, ["SHA-256"])
case("tokenize, standard output on a full disk", [TOKENIZE, docs[0]], 1, ["stdout"], stdout_path="/dev/full")
long_word = path("long_word.txt")
open(long_word, "w").write("a" * 400000)
t0 = time.time()
r = subprocess.run([TOKENIZE, "--bench", long_word], capture_output=True, text=True, timeout=LIMIT_S)
el = time.time() - t0
check(f"tokenize one 400 KB word: finishes (it took {el:.1f} s; quadratic merging took 88 s)",
      r.returncode == 0 and "100000 tokens" in r.stdout, r.stdout + r.stderr)
summary.append(f"tokenize --bench on a 400 KB word: exit {r.returncode} in {el:.1f} s: {r.stdout.strip()}")

# ------------------------------------------------------------------------------------ attn_run (its inputs are read before any GPU)


def npy(p, arr=None, header=None, raw=None):
    if raw is not None:
        open(p, "wb").write(raw)
    elif header is not None:
        h = header.encode()
        h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
        open(p, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + (b"" if arr is None else arr.tobytes()))
    else:
        np.save(p, arr)
    return p


q = npy(path("q.npy"), rng.standard_normal((256, 2, 64)).astype(np.float32))
npys = {
    "not .npy": (npy(path("n_text.npy"), raw=b"hello there, not an array"), "not a .npy"),
    "a 2^60-element shape": (npy(path("n_huge.npy"), np.zeros(4, np.float32), header="{'descr': '<f4', 'fortran_order': False, "
                                                                               "'shape': (1048576, 1048576, 1048576), }"), "shape"),
    "a shape larger than the file": (npy(path("n_short.npy"), np.zeros(10, np.float32), header="{'descr': '<f4', "
                                                                                             "'fortran_order': False, 'shape': (256, 2, 64), }"),
                                     "shape"),
    "a float64 dtype": (npy(path("n_f8.npy"), rng.standard_normal((256, 2, 64))), "dtype"),
    "a bad shape entry": (npy(path("n_shape.npy"), None, header="{'descr': '<f4', 'fortran_order': False, 'shape': (2x, 3), }"),
                          "shape"),
    "a header length past the file": (npy(path("n_hlen.npy"), raw=b"\x93NUMPY\x01\x00\xff\xff{'descr'"), "header"),
}
for name, (p, msg) in npys.items():
    case(f"attn_run --q {name}", [ATTN_RUN, "--q", p, "--k", q, "--v", q], 1, [os.path.basename(p), msg])
case("attn_run --q a FIFO", [ATTN_RUN, "--q", fifo(path("q.fifo")), "--k", q, "--v", q], 1, ["q.fifo", "FIFO"])
case("attn_run --q a folder", [ATTN_RUN, "--q", T, "--k", q, "--v", q], 1, ["directory"])
case("attn_run --k of another shape", [ATTN_RUN, "--q", q, "--k", npy(path("k_small.npy"), np.zeros((128, 2, 64), np.float32)),
     "--v", q], 1, ["--k"])
case("attn_run --doc-ids of the wrong length", [ATTN_RUN, "--q", q, "--k", q, "--v", q, "--doc-ids",
     npy(path("doc.npy"), np.zeros(7, np.int32))], 1, ["doc.npy"])
case("attn_run --doc-ids decreasing", [ATTN_RUN, "--q", q, "--k", q, "--v", q, "--doc-ids",
     npy(path("doc2.npy"), np.arange(256, 0, -1).astype(np.int32))], 1, ["doc2.npy", "nondecreasing"])
case("attn_run without --q", [ATTN_RUN, "--k", q, "--v", q], 2, ["--q"])
case("attn_run --window -1", [ATTN_RUN, "--q", q, "--k", q, "--v", q, "--window", "-1"], 2, ["--window"])
case("attn_run --causal 2", [ATTN_RUN, "--q", q, "--k", q, "--v", q, "--causal", "2"], 2, ["--causal"])
case("attn_run --window-mask up", [ATTN_RUN, "--q", q, "--k", q, "--v", q, "--window-mask", "up"], 2, ["--window-mask"])
case("attn_run --prefix without causal", [ATTN_RUN, "--q", q, "--k", q, "--v", q, "--causal", "0", "--prefix", "5"], 2,
     ["--prefix", "--causal"])
case("attn_run --prefix -3", [ATTN_RUN, "--q", q, "--k", q, "--v", q, "--prefix", "-3"], 2, ["--prefix"])

# ------------------------------------------------------------------------------------ scripts
LOGS = os.path.join(ROOT, "tests", "fixtures", "record_logs")
rec = sorted(os.path.join(LOGS, n) for n in os.listdir(LOGS) if n.endswith(".txt"))
two_runs = path("two_runs.txt")
open(two_runs, "w").write(open(rec[4]).read() + open(rec[5]).read())
case("speedrun_logs on two runs put together", [PY, os.path.join(S, "speedrun_logs.py"), two_runs], 1, ["two_runs.txt", "more than one run"])
case("speedrun_logs on a folder", [PY, os.path.join(S, "speedrun_logs.py"), T], 1, [T, "directory"])
case("speedrun_logs on a FIFO", [PY, os.path.join(S, "speedrun_logs.py"), fifo(path("log.fifo"))], 1, ["log.fifo", "FIFO"])
case("speedrun_logs on a missing file", [PY, os.path.join(S, "speedrun_logs.py"), path("nolog.txt")], 1, ["nolog.txt"])
case("speedrun_logs on a binary file", [PY, os.path.join(S, "speedrun_logs.py"), path("ck_empty.bin")], 1, ["ck_empty.bin"])
open(path("badjson.txt"), "w").write(open(rec[4]).read())
open(path("badjson.jsonl"), "w").write("{not json\n")
case("speedrun_logs with a broken JSON-lines file beside the log", [PY, os.path.join(S, "speedrun_logs.py"), path("badjson.txt")], 1,
     ["badjson.jsonl"])
case("speedrun_logs, standard output on a full disk", [PY, os.path.join(S, "speedrun_logs.py"), rec[4]], 1, ["disk full"],
     stdout_path="/dev/full")
REP = [PY, os.path.join(S, "ab_report.py")]
case("ab_report --logs-dir missing", REP + ["--logs-dir", path("nologs"), "--out", path("rep")], 1, ["nologs"])
case("ab_report --logs-dir a file", REP + ["--logs-dir", A_FILE, "--out", path("rep")], 1, ["a_file"])
case("ab_report with neither --logs-dir nor --group", REP + ["--out", path("rep")], 2, ["--logs-dir"])
case("ab_report --group without @GPUS", REP + ["--group", "x=" + rec[4], "--out", path("rep")], 1, ["--group"])
case("ab_report --group with GPUS 'two'", REP + ["--group", "x@two=" + rec[4], "--out", path("rep")], 1, ["--group"])
case("ab_report --group matching nothing", REP + ["--group", "x@1=" + path("none*.txt"), "--out", path("rep")], 1, ["matches no file"])
case("ab_report two groups of one name", REP + ["--group", "x@8=" + rec[4], "--group", "x@8=" + rec[5], "--out", path("rep")], 1,
     ["given twice"])
case("ab_report --out that is a file", REP + ["--group", "x@8=" + rec[4], "--out", A_FILE], 1, ["--out"], keep=[A_FILE])
case("ab_report on a log holding two runs", REP + ["--group", "x@8=" + two_runs, "--out", path("rep")], 1, ["more than one run"])
logs_fifo = path("logs_fifo")
os.makedirs(logs_fifo)
fifo(os.path.join(logs_fifo, "uni_g1_r0.txt"))
case("ab_report, a FIFO named like a log", REP + ["--logs-dir", logs_fifo, "--out", path("rep")], 1, ["uni_g1_r0.txt", "FIFO"])
# peer/full_run_logs.py: a FIFO where a run's JSON lines belong, or as LOG_DIR, is named (never
# read, which would hang; never passed over as no log)
FRL = [PY, os.path.join(ROOT, "peer", "full_run_logs.py")]
fr_fifo = path("fr_fifo")
os.makedirs(fr_fifo)
fifo(os.path.join(fr_fifo, "peer_g1.jsonl"))
for mode in ("check", "table"):
    case(f"full_run_logs {mode}, a FIFO named like a run's JSON lines", FRL + [mode, fr_fifo, "1", "20", "x_*.bin"], 1,
         ["peer_g1.jsonl", "FIFO"])
    case(f"full_run_logs {mode}, LOG_DIR a FIFO", FRL + [mode, fifo(path(f"fr_dir_{mode}.fifo")), "1", "20", "x_*.bin"], 1,
         [f"fr_dir_{mode}.fifo", "not a folder"])
logs_badcamp = path("logs_badcamp")
os.makedirs(logs_badcamp)
shutil.copy(rec[4], os.path.join(logs_badcamp, "uni_g8_r0.txt"))
open(os.path.join(logs_badcamp, "campaign.json"), "w").write("{nope")
case("ab_report, a broken campaign.json", REP + ["--logs-dir", logs_badcamp, "--out", path("rep")], 1, ["campaign.json"])
RUN = [PY, os.path.join(S, "ab_run.py")]
fake = f"{PY} {os.path.join(ROOT, 'tests', 'fake_trainer.py')}"
for name, flags, rc, named in [
    ("--campaign that is a file", ["--campaign", A_FILE, "--variant", "a=", "--trainer", fake], 1, "--campaign"),
    ("--gpus x", ["--campaign", path("c1"), "--gpus", "x", "--variant", "a="], 2, "--gpus"),
    ("--gpus 0", ["--campaign", path("c1"), "--gpus", "0", "--variant", "a="], 2, "--gpus"),
    ("--runs 0", ["--campaign", path("c1"), "--runs", "0", "--variant", "a="], 2, "--runs"),
    ("--runs abc", ["--campaign", path("c1"), "--runs", "abc", "--variant", "a="], 2, "--runs"),
    ("--seed0 -1", ["--campaign", path("c1"), "--seed0", "-1", "--variant", "a="], 2, "--seed0"),
    ("--variant without =", ["--campaign", path("c1"), "--variant", "a"], 2, "--variant"),
    ("--variant with a slash", ["--campaign", path("c1"), "--variant", "a/b=x"], 2, "--variant"),
    ("two variants of one name", ["--campaign", path("c1"), "--variant", "a=", "--variant", "a=--x 1"], 2, "variant names"),
    ("--variant with an unbalanced quote", ["--campaign", path("c1"), "--variant", "a=--x 'y"], 1, "--variant a"),
    ("--trainer with an unbalanced quote", ["--campaign", path("c1"), "--variant", "a=", "--trainer", "'x"], 1, "--trainer"),
    ("--trainer that does not exist", ["--campaign", path("c2"), "--variant", "a=", "--runs", "1", "--trainer", path("no_trainer")], 1,
     "no_trainer"),
]:
    case(f"ab_run {name}", RUN + flags, rc, [named])
for name, flags, named in [
    ("-1 shards", ["-1"], "train_shards"),
    ("500 shards", ["500"], "train_shards"),
    ("abc shards", ["abc"], "train_shards"),
    ("--timeout nan", ["1", "--timeout", "nan"], "--timeout"),
    ("--timeout -5", ["1", "--timeout", "-5"], "--timeout"),
    ("--out-dir that is a file", ["1", "--out-dir", A_FILE], "--out-dir"),
]:
    case(f"fetch_fineweb {name}", FF + flags + ["--base-url", "http://127.0.0.1:9/none"], 2, [named], keep=[A_FILE])
case("fetch_fineweb, server unreachable", FF + ["0", "--out-dir", path("fw"), "--base-url", "http://127.0.0.1:9/none", "--timeout", "5"],
     1, ["fineweb_val_000000.bin", "offline"])
case("gen_unicode_tables with an argument", [PY, os.path.join(S, "gen_unicode_tables.py"), "extra"], 2, ["gen_unicode_tables"])
case("make_tiktoken_fixture with no mode", [PY, os.path.join(S, "make_tiktoken_fixture.py")], 2, ["inputs"])
case("make_tiktoken_fixture ids on a missing input", [PY, os.path.join(S, "make_tiktoken_fixture.py"), "ids",
     os.path.join(ROOT, "data", "gpt2"), path("no.json")], 1, ["no.json"])
case("compare_flex on a missing file", [PY, os.path.join(ROOT, "bench", "compare_flex.py"), path("no.json")], 2, ["no.json"])
VF = ["bash", os.path.join(ROOT, "bench", "vs_flex.sh")]
VF_ENV = dict(os.environ, LOG_DIR=path("vs_flex_logs"))
case("vs_flex.sh into a LOG_DIR that exists", VF, 2, ["LOG_DIR"], env=dict(os.environ, LOG_DIR=T), keep=[A_FILE])
case("vs_flex.sh --heads 0", VF + ["--heads", "0"], 2, ["--heads"], env=VF_ENV)
case("vs_flex.sh --head-dim 96", VF + ["--head-dim", "96"], 2, ["--head-dim"], env=VF_ENV)
case("vs_flex.sh --geometry (not a shape flag)", VF + ["--geometry"], 2, ["--geometry"], env=VF_ENV)
case("vs_flex.sh with a stray output file", VF + ["--T", "4096", "out.json"], 2, ["out.json", "not a flag"], env=VF_ENV)
case("vs_flex.sh with a flag and no value", VF + ["--T"], 2, ["--T", "needs a value"], env=VF_ENV)
case("vs_flex.sh with an unknown flag", VF + ["--bogus", "1"], 2, ["--bogus"], env=VF_ENV)
check("vs_flex.sh: a refused run leaves no log folder", not os.path.exists(path("vs_flex_logs")))
if shutil.which("nvidia-smi") is None:
    case("vs_flex.sh without a GPU: a message, not a crash", VF + ["--T", "4096", "--causal", "1"], 1, ["no GPU"], env=VF_ENV)

# model_dump (the fp64 reference's dump for outside checks) and the attention benchmark
MD = os.path.join(BUILD, "model_dump")
case("model_dump without a folder", [MD], 2, ["usage"])
case("model_dump into a file", [MD, A_FILE], 2, ["a_file", "not a folder"], keep=[A_FILE])
os.makedirs(path("dump_full"))
case("model_dump on a full disk (file size limit)", [MD, path("dump_full")], 1, ["cannot write"], fsize=20000)
check("model_dump on a full disk: the folder stays empty, no staging folder left",
      os.listdir(path("dump_full")) == [] and not [n for n in os.listdir(T) if n.startswith(".dump_full")], str(os.listdir(T)))
DUMP_USED = path("dump_used")
os.makedirs(DUMP_USED)
open(os.path.join(DUMP_USED, "manifest.json"), "w").write('{"an earlier dump": 1}\n')
case("model_dump into a folder holding an earlier dump: refused, untouched", [MD, DUMP_USED], 2, ["dump_used", "not empty"],
     keep=[DUMP_USED])
os.symlink(path("dump_full"), path("dump_link"))
case("model_dump into a link to a folder", [MD, path("dump_link")], 2, ["dump_link", "not a folder"])
case("model_dump into a folder whose parent is missing", [MD, path("no_parent", "dump")], 2, ["no_parent"])
case("model_dump into /", [MD, "/"], 2, ["'/'"])
r = subprocess.run([MD, path("dump_new") + "/"], capture_output=True, text=True)
check("model_dump into a new folder: every file there, no staging folder left",
      r.returncode == 0 and sorted(os.listdir(path("dump_new"))) == ["grad.f64", "logits.f64", "manifest.json", "params.f64",
                                                                     "params_after3.f64"]
      and not [n for n in os.listdir(T) if n.startswith(".dump_new")], r.stdout + r.stderr)
if shutil.which("nvidia-smi") is None:
    case("bench_attention without a GPU: a message, not a crash", [os.path.join(BUILD, "bench", "bench_attention"), path("b.json")], 1,
         ["bench_attention: error"])
BA = os.path.join(BUILD, "bench", "bench_attention")
case("bench_attention: ATTN_BWD_OWN=32 (the blocks are 64 or 128)", [BA, path("b.json")], 2, ["ATTN_BWD_OWN=32", "64 or 128"],
     env=dict(os.environ, ATTN_BWD_OWN="32"))
case("bench_attention: ATTN_BWD=split (fused or two-kernels)", [BA, path("b.json")], 2, ["ATTN_BWD=split", "fused or two-kernels"],
     env=dict(os.environ, ATTN_BWD="split"))
check("bench_attention: a refused kernel choice writes no JSON", not os.path.exists(path("b.json")))
BM = os.path.join(BUILD, "bench", "bench_matmul")
case("bench_matmul with a width cuBLASLt cannot take", [BM, "--width", "100"], 2, ["multiple of 8", "100"])
case("bench_matmul --ranks 17", [BM, "--ranks", "17"], 2, ["--ranks"])
if shutil.which("nvidia-smi") is None:
    case("bench_matmul without a GPU: a message, not a crash", [BM], 1, ["bench_matmul: "])

EB = os.path.join(BUILD, "bench", "exchange_bench")
case("exchange_bench alone (one rank): it needs mpirun with several", [EB], 2, ["mpirun -np N"])
case("exchange_bench --reps 0", [EB, "--reps", "0"], 2, ["--reps", "from 1 to 1000"])
case("exchange_bench --layers 3 (odd)", [EB, "--layers", "3"], 2, ["--layers must be even", "3"])
case("exchange_bench --width 1e3", [EB, "--width", "1e3"], 2, ["--width"])
case("exchange_bench --width 100 (6 heads of an even size need a multiple of 12)", [EB, "--width", "100"], 2, ["--width must be a multiple of 12", "100"])
if shutil.which("mpirun") and shutil.which("nvidia-smi") is None:
    case("exchange_bench under mpirun -np 2 without a GPU: a message, not a crash", ["mpirun", "--oversubscribe", "-np", "2", EB], 2,
         ["2 ranks on this machine, 0 GPU(s) visible"],
         env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))

# any rank's refusal reaches the user, naming its rank, before any GPU work, and every rank leaves
# with the job's one code (2 for a flag, 1 for a file; the larger when several refuse): mpirun
# with per-rank arguments (its 'A : B' form), each refusal on one rank only
if shutil.which("mpirun"):
    MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    def two_ranks(rank0, rank1, wdirs=(ROOT, ROOT)):
        return ["mpirun", "--oversubscribe", "-np", "1", "-wdir", wdirs[0], TRAIN, *rank0, ":", "-np", "1", "-wdir", wdirs[1], TRAIN,
                *rank1]
    # the same flags in folders of other files (as on two hosts): relative paths that name other
    # files on each rank. WD_GOOD holds the prepared shards; WD_NONE nothing but a file that is
    # no checkpoint; WD_OTHER shards of the same names, one token changed (no manifest)
    WD_GOOD, WD_NONE, WD_OTHER = path("wd_good"), path("wd_none"), path("wd_other")
    os.makedirs(WD_NONE)
    shutil.copytree(GOOD, os.path.join(WD_GOOD, "d"))
    shutil.copytree(GOOD, os.path.join(WD_OTHER, "d"))
    os.remove(os.path.join(WD_OTHER, "d", "manifest.tsv"))
    with open(os.path.join(WD_OTHER, "d", "toy_train_000001.bin"), "r+b") as f:
        f.seek(1024 + 2 * 7)
        f.write(struct.pack("<H", 123))
    open(os.path.join(WD_NONE, "ck.bin"), "w").write("not a checkpoint\n")
    REL = ["--train-data", "d/toy_train_*.bin", "--val-data", "d/toy_val_*.bin", *DATA[4:]]
    for name, cmd, rc, names in [
        ("a bad flag on rank 1 only", two_ranks(DATA, DATA + ["--bogus", "1"]), 2, ["train_gpt: rank 1 of 2:", "--bogus"]),
        ("a --train-data that matches nothing on rank 1 only", two_ranks(REL, REL, (WD_GOOD, WD_NONE)), 1,
         ["train_gpt: rank 1 of 2: error:", "d/toy_train_*.bin"]),
        ("a bad flag on each rank, each its own", two_ranks(DATA + ["--steps", "0"], DATA + ["--bogus", "1"]), 2,
         ["train_gpt: rank 0 of 2: --steps", "train_gpt: rank 1 of 2:", "--bogus"]),
        ("no checkpoint on rank 0, a file that is none on rank 1", two_ranks(REL + ["--resume", "ck.bin"], REL + ["--resume", "ck.bin"],
                                                                             (WD_GOOD, WD_NONE)), 1,
         ["train_gpt: rank 0 of 2: error:", "ck.bin: cannot open", "train_gpt: rank 1 of 2: error:", "not a train_gpt checkpoint"]),
        # every rank must be given the same configuration (the resolved flags, --log-file aside),
        # and read the same data by content: a rank that differs is named with each differing
        # field and both values, exit 2, before any GPU work
        ("another --seed on rank 1", two_ranks(DATA, DATA + ["--seed", "7"]), 2,
         ["train_gpt: rank 1 of 2: error: its configuration differs from rank 0's: --seed '7' where rank 0 has '1337'"]),
        ("another --steps and --resume on rank 1", two_ranks(DATA, DATA + ["--steps", "5", "--resume", path("ck.bin")]), 2,
         ["train_gpt: rank 1 of 2: error: its configuration differs from rank 0's: --steps '5' where rank 0 has '300'",
          f"--resume '{path('ck.bin')}' where rank 0 has ''"]),
        ("the default preset on rank 0, tiny on rank 1", two_ranks(DATA, DATA + ["--preset", "tiny"]), 2,
         ["train_gpt: rank 1 of 2: error: its configuration differs", "--preset 'tiny' where rank 0 has 'default'",
          "--layers '2' where rank 0 has '4'"]),
        ("other training data of the same names on rank 1", two_ranks(REL, REL, (WD_GOOD, WD_OTHER)), 2,
         ["train_gpt: rank 1 of 2: error: its configuration differs from rank 0's: train_data_sha256"]),
        # a rank that only checks the data would leave the others waiting at the GPU's gate (a hang)
        ("--check-data on rank 1 only", two_ranks(DATA, DATA + ["--check-data"]), 2,
         ["train_gpt: rank 1 of 2: --check-data: checks the data in one process; run it without mpirun"]),
        ("--check-data on every rank", two_ranks(DATA + ["--check-data"], DATA + ["--check-data"]), 2,
         ["train_gpt: rank 0 of 2: --check-data", "train_gpt: rank 1 of 2: --check-data"]),
    ]:
        _, out = case(f"train_gpt under mpirun, {name}: named with its rank, exit {rc}", cmd, rc, names, env=MPI_ENV)
        check(f"train_gpt under mpirun, {name}: refused before any GPU work", "GPU" not in out, out[-800:])

# the GPU scripts check their inputs before they build or need a GPU
GB = ["bash", os.path.join(ROOT, "bench", "gpu_bench.sh")]
case("gpu_bench.sh PARTS=bogus", GB, 2, ["bogus"], env=dict(os.environ, PARTS="bogus"))
case("gpu_bench.sh STEPS=abc", GB, 2, ["STEPS"], env=dict(os.environ, STEPS="abc"))
case("gpu_bench.sh into a LOG_DIR that exists", GB, 2, ["LOG_DIR"], env=dict(os.environ, LOG_DIR=T), keep=[A_FILE])
for n_gpus, needle in ((1, "needs several GPUs"), (3, "do not divide")):
    fake = path(f"gpus_{n_gpus}_bin")
    os.makedirs(fake)
    with open(os.path.join(fake, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: Stand-in GPU (UUID: GPU-{i:08d})'\n" for i in range(n_gpus)))
    os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
    env = dict(os.environ, PATH=fake + os.pathsep + os.environ.get("PATH", ""), PARTS="exchange", LOG_DIR=path(f"gb_ex{n_gpus}"))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    case(f"gpu_bench.sh PARTS=exchange on {n_gpus} GPU(s)", GB, 2, [needle], env=env)
    check(f"gpu_bench.sh PARTS=exchange on {n_gpus} GPU(s): no log folder made", not os.path.exists(path(f"gb_ex{n_gpus}")))
CT = ["bash", os.path.join(ROOT, "bench", "compare_trees.sh")]
case("compare_trees.sh without a tree", CT, (1, 2), ["OTHER_TREE"])
case("compare_trees.sh on a folder that is not a checkout", CT + [T], 2, ["not a checkout"])
case("compare_trees.sh ROUNDS=x", CT + [ROOT], 2, ["ROUNDS"], env=dict(os.environ, ROUNDS="x"))
case("mask_ablation.sh GPUS=x", ["bash", os.path.join(ROOT, "ablations", "mask_ablation.sh")], 2, ["--gpus"],
     env=dict(os.environ, GPUS="x", CAMPAIGN=path("camp_bad")))
check("mask_ablation.sh GPUS=x: nothing written", not os.path.exists(path("camp_bad")))
case("prefix_ablation.sh PREFIX=x", ["bash", os.path.join(ROOT, "ablations", "prefix_ablation.sh")], 2, ["PREFIX"],
     env=dict(os.environ, PREFIX="x", CAMPAIGN=path("camp_bad2")))
check("prefix_ablation.sh PREFIX=x: nothing written", not os.path.exists(path("camp_bad2")))
PC = ["bash", os.path.join(ROOT, "peer", "peer_compare.sh")]
case("peer_compare.sh STEPS=abc", PC, 2, ["STEPS"], env=dict(os.environ, STEPS="abc"))
case("peer_compare.sh STEPS=5 (nothing timed)", PC, 2, ["STEPS"], env=dict(os.environ, STEPS="5"))
case("peer_compare.sh DATA=bogus", PC, 2, ["DATA", "bogus"], env=dict(os.environ, DATA="bogus"))
NO_GPU_BIN = path("no_gpu_bin")
os.makedirs(NO_GPU_BIN)
with open(os.path.join(NO_GPU_BIN, "nvidia-smi"), "w") as f:
    f.write("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
os.chmod(os.path.join(NO_GPU_BIN, "nvidia-smi"), 0o755)
NO_GPU = dict(os.environ, PATH=NO_GPU_BIN + os.pathsep + os.environ.get("PATH", ""), LOG_DIR=path("pc_nogpu"))
had_synthetic = os.path.exists(os.path.join(ROOT, "data", "synthetic"))
case("peer_compare.sh on one GPU where there is none", PC, 1, ["no GPU"], env=NO_GPU)
check("peer_compare.sh with no GPU: no log folder (where the build's log goes), no shards made",
      not os.path.exists(path("pc_nogpu")) and os.path.exists(os.path.join(ROOT, "data", "synthetic")) == had_synthetic)
case("peer_compare.sh into a LOG_DIR that exists", PC, 2, ["LOG_DIR"], env=dict(os.environ, LOG_DIR=T, DATA="gcide"), keep=[A_FILE])
LC = ["bash", os.path.join(ROOT, "ablations", "learning_compare.sh")]
write_shard(os.path.join(T, "sh_train_000001.bin"), [1, 2, 3])
case("learning_compare.sh without LOG_DIR", LC, (1, 2), ["LOG_DIR"], env={k: v for k, v in os.environ.items() if k != "LOG_DIR"})
case("learning_compare.sh RUNS=x", LC, 2, ["RUNS"], env=dict(os.environ, LOG_DIR=path("lc"), RUNS="x"))
case("learning_compare.sh VARIANTS=bogus", LC, 2, ["bogus"], env=dict(os.environ, LOG_DIR=path("lc"), VARIANTS="bogus",
                                                                    DATA=os.path.join(T, "sh")))
case("learning_compare.sh DATA without shards", LC, 2, ["DATA"], env=dict(os.environ, LOG_DIR=path("lc"), DATA=path("nothing")))
case("learning_compare.sh JOBS=peer:x", LC, 2, ["peer:x"], env=dict(os.environ, LOG_DIR=path("lc"), JOBS="peer:x",
                                                                   DATA=os.path.join(T, "sh")))
check("learning_compare.sh refusals: nothing written", not os.path.exists(path("lc")))
case("prefix_parity.sh ROUNDS=0", ["bash", os.path.join(ROOT, "ablations", "prefix_parity.sh")], 2, ["ROUNDS"], env=dict(os.environ, ROUNDS="0"))
case("prefix_parity.sh into a LOG_DIR that exists", ["bash", os.path.join(ROOT, "ablations", "prefix_parity.sh")], 2, ["LOG_DIR"],
     env=dict(os.environ, LOG_DIR=T), keep=[A_FILE])
case("flex_uni_bi.py --window-blocks 0", [sys.executable, os.path.join(ROOT, "ablations", "flex_uni_bi.py"), "--window-blocks", "0"], 2,
     ["--window-blocks"])

# ------------------------------------------------------------------------------------ train_gpt: a loss with nothing to score
# with --prefix-tokens P, a sequence whose documents all fit inside their prefixes keeps no target;
# a run where no validation (or training) sequence keeps one is refused before it starts
short_docs = np.where(np.arange(64 * 4 + 1) % 4 == 0, 50256, 300).astype(np.uint16)  # documents of 4 tokens
SHORT_DOCS = write_shard(path("short_docs.bin"), short_docs)
case("train_gpt --prefix-tokens 8, every validation document inside the prefix: refused, not val_loss 0",
     [TRAIN, "--train-data", GOOD_TRAIN, "--val-data", SHORT_DOCS, "--seq-len", "64", "--val-tokens", "192", "--prefix-tokens", "8"], 2,
     ["--prefix-tokens", "validation", "short_docs.bin"])
case("train_gpt --prefix-tokens 8, every training document inside the prefix: refused",
     [TRAIN, "--train-data", SHORT_DOCS, "--val-data", GOOD_VAL, "--seq-len", "64", "--val-tokens", "64", "--prefix-tokens", "8",
      "--steps", "3", "--seqs-per-step", "1"], 2, ["--prefix-tokens", "training", "short_docs.bin"])

# ------------------------------------------------------------------------------------ train_gpt: refused at start-up, not later
# the checkpoint folder is made only once the run can start, and the log and checkpoint folder are
# tried for writing before anything else: nothing is left behind by a refusal, and an unwritable
# one is named before training instead of at its first checkpoint


def unwritable_dir():
    """An existing folder where no file can be made, even by root (a read-only file system), or None."""
    if os.geteuid() != 0:
        d = path("readonly")
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o555)
        return d
    for d in ("/sys/kernel", "/proc/self"):
        try:
            open(os.path.join(d, "train_gpt_probe"), "w").close()
        except OSError:
            return d
        os.remove(os.path.join(d, "train_gpt_probe"))
    return None


NEW_CKPT = path("ck_new", "deeper")
case("train_gpt --checkpoint-dir NEW, refused for its data: no folder left behind",
     [TRAIN, "--train-data", shards["truncated"][0], "--val-data", GOOD_VAL, "--seq-len", "64", "--val-tokens", "64",
      "--checkpoint-dir", NEW_CKPT], 1, ["truncated.bin"])
check("train_gpt --checkpoint-dir NEW, refused for its data: neither the folder nor its parent made",
      not os.path.exists(path("ck_new")), str(os.listdir(T)))
EMPTY_CKPT = path("ck_empty")
os.makedirs(EMPTY_CKPT)
case("train_gpt --checkpoint-dir an empty folder, refused for its data: the folder stays empty",
     [TRAIN, "--train-data", shards["bad magic"][0], "--val-data", GOOD_VAL, "--seq-len", "64", "--val-tokens", "64",
      "--checkpoint-dir", EMPTY_CKPT], 1, ["magic.bin"], keep=[EMPTY_CKPT])
check("train_gpt --checkpoint-dir an empty folder: no probe file left", os.listdir(EMPTY_CKPT) == [], str(os.listdir(EMPTY_CKPT)))
if shutil.which("nvidia-smi") is None:
    case("train_gpt --checkpoint-dir NEW without a GPU: no folder left behind", [TRAIN, *DATA, "--checkpoint-dir", NEW_CKPT], 1,
         ["GPU"])
    check("train_gpt --checkpoint-dir NEW without a GPU: the folder was not made", not os.path.exists(path("ck_new")))
case("train_gpt --checkpoint-dir under a file", [TRAIN, *DATA, "--checkpoint-dir", os.path.join(A_FILE, "ck")], 2,
     ["--checkpoint-dir", "a_file", "not a folder"], keep=[A_FILE])
RO = unwritable_dir()
if RO:
    case("train_gpt --checkpoint-dir an unwritable folder: refused before training", [TRAIN, *DATA, "--checkpoint-dir", RO], 2,
         ["--checkpoint-dir", RO])
    case("train_gpt --checkpoint-dir a new folder inside an unwritable one", [TRAIN, *DATA, "--checkpoint-dir",
                                                                              os.path.join(RO, "ck", "new")], 2, ["--checkpoint-dir", RO])
    case("train_gpt --log-file in an unwritable folder: refused before training", [TRAIN, *DATA, "--log-file",
                                                                                   os.path.join(RO, "run.txt")], 2, ["--log-file", "run.txt"])
case("train_gpt --log-file with a name too long for the file system", [TRAIN, *DATA, "--log-file", path("x" * 300 + ".txt")], 2,
     ["--log-file", "xxxx"])
check("train_gpt --log-file refusals: no log or probe left", not [n for n in os.listdir(T) if n.startswith("x" * 20)])


def data_digest(pattern):
    """The data digest train_gpt records (data/dataloader.h): the SHA-256 of its shards' SHA-256s in order."""
    return hashlib.sha256("".join(hashlib.sha256(open(f, "rb").read()).hexdigest() + "\n"
                                  for f in sorted(glob.glob(pattern))).encode()).hexdigest()


RUN_DATA = f"train_data_sha256={data_digest(GOOD_TRAIN)} val_data_sha256={data_digest(GOOD_VAL)}"


def fnv_ckpt(config, step, blobs, data=RUN_DATA, adam_steps=None):
    """A checkpoint file (train/checkpoint.h, version 2) with a valid checksum; adam_steps is the
    step unless given."""
    b = (b"TGPTCKPT" + struct.pack("<IQ", 2, len(config)) + config.encode() + struct.pack("<Q", len(data)) + data.encode() +
         struct.pack("<qqI", step, step if adam_steps is None else adam_steps, len(blobs)))
    for name, floats in blobs.items():
        b += struct.pack("<I", len(name)) + name.encode() + struct.pack("<Q", len(floats)) + np.asarray(floats, "<f4").tobytes()
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) % 2**64
    return b + struct.pack("<Q", h)


# the run's fingerprint, as the refusal of another configuration's checkpoint shows it
open(path("ck_other.bin"), "wb").write(fnv_ckpt("another run", 1, {"master": [0.0]}))
r = subprocess.run([TRAIN, *DATA, "--steps", "5", "--resume", path("ck_other.bin")], capture_output=True, text=True, cwd=ROOT)
fp = next((ln.split("this run:", 1)[1].strip() for ln in r.stderr.splitlines() if "this run:" in ln), None)
check("train_gpt --resume of another configuration: refused, showing this run's", r.returncode == 1 and fp, r.stderr)
if fp:
    open(path("ck_late.bin"), "wb").write(fnv_ckpt(fp, 9, {"master": [0.0] * 10}))
    case("train_gpt --resume a checkpoint past the run's last step: refused before the GPU",
         [TRAIN, *DATA, "--steps", "5", "--resume", path("ck_late.bin")], 1, ["ck_late.bin", "step 9 outside the run"])
    # a number outside its range, though the checksum holds: named with the file and the field
    open(path("ck_adam.bin"), "wb").write(fnv_ckpt(fp, 2, {"master": [0.0] * 10}, adam_steps=-5))
    case("train_gpt --resume a checkpoint whose adam_steps is -5: refused naming the file and field",
         [TRAIN, *DATA, "--steps", "5", "--resume", path("ck_adam.bin")], 1, ["ck_adam.bin", "field adam_steps is -5"])
    open(path("ck_nan.bin"), "wb").write(fnv_ckpt(fp, 2, {"master": [0.0] * 9 + [float("nan")]}))
    case("train_gpt --resume a checkpoint holding a NaN weight: refused naming the file and field",
         [TRAIN, *DATA, "--steps", "5", "--resume", path("ck_nan.bin")], 1, ["ck_nan.bin", "field master[9] is nan"])
    open(path("ck_small.bin"), "wb").write(fnv_ckpt(fp, 2, {"master": [0.0] * 10}))
    case("train_gpt --resume a checkpoint whose weights are of another size: refused before the GPU",
         [TRAIN, *DATA, "--steps", "5", "--resume", path("ck_small.bin")], 1, ["ck_small.bin", "master"])
    # data known by content: a checkpoint made on other shards (same flags, same names) is refused,
    # naming both digests; so is one that records no data digest at all
    other = "train_data_sha256=" + "ab" * 32 + " val_data_sha256=" + "cd" * 32
    open(path("ck_otherdata.bin"), "wb").write(fnv_ckpt(fp, 2, {"master": [0.0] * 10}, data=other))
    case("train_gpt --resume a checkpoint made on other data: refused before the GPU, naming both digests",
         [TRAIN, *DATA, "--steps", "5", "--resume", path("ck_otherdata.bin")], 1,
         ["ck_otherdata.bin", "ab" * 32, "cd" * 32, data_digest(GOOD_TRAIN), data_digest(GOOD_VAL)])
    open(path("ck_nodata.bin"), "wb").write(fnv_ckpt(fp, 2, {"master": [0.0] * 10}, data=""))
    case("train_gpt --resume a checkpoint that records no data digest: refused before the GPU",
         [TRAIN, *DATA, "--steps", "5", "--resume", path("ck_nodata.bin")], 1, ["ck_nodata.bin", "data"])
    # a shard changed in place at the same size (a byte of its last token) is refused, naming it
    changed = path("changed")
    shutil.copytree(GOOD, changed)
    victim = sorted(glob.glob(os.path.join(changed, "toy_train_*.bin")))[0]
    with open(victim, "r+b") as f:
        f.seek(-2, 2)
        last = struct.unpack("<H", f.read(2))[0]
        f.seek(-2, 2)
        f.write(struct.pack("<H", 2 if last == 1 else 1))  # another valid token id
    case("train_gpt a shard changed in place at the same size: refused naming it", [TRAIN, "--train-data",
         os.path.join(changed, "toy_train_*.bin"), "--val-data", GOOD_VAL, "--seq-len", "64", "--val-tokens", "64"], 1,
         [os.path.basename(victim), "SHA-256"])

# ------------------------------------------------------------------------------------ train_gpt: training on the validation data
# the validation loss of a run that trains on its validation shards measures memory, not learning:
# the same pattern for both (a flag error, exit 2), or a training shard whose bytes are a
# validation shard's (a copy under another name, the same file under two names, one shard of
# the validation set among the training set's), is refused before any GPU work naming both files
VAL_SHARDS = sorted(glob.glob(GOOD_VAL))
TRAIN_SHARDS = sorted(glob.glob(GOOD_TRAIN))
check("fixture: the prepared set has training and validation shards", VAL_SHARDS and TRAIN_SHARDS,
      str(os.listdir(GOOD)))
SEQ = ["--seq-len", "64", "--val-tokens", "64"]
case("train_gpt --train-data equal to --val-data: refused as a flag error",
     [TRAIN, "--train-data", GOOD_VAL, "--val-data", GOOD_VAL, *SEQ], 2, ["--train-data", "--val-data", "toy_val_*.bin"])
case("train_gpt --val-data one of the training shards: refused naming it",
     [TRAIN, "--train-data", GOOD_TRAIN, "--val-data", TRAIN_SHARDS[-1], *SEQ], 1,
     [os.path.basename(TRAIN_SHARDS[-1]), "--val-data", "--train-data"])
copied = path("tov_copied")  # the training shards, and a validation shard copied in under a training name (no manifest)
os.makedirs(copied)
for f in TRAIN_SHARDS:
    shutil.copy(f, copied)
shutil.copy(VAL_SHARDS[0], os.path.join(copied, "toy_train_000090.bin"))
case("train_gpt a validation shard copied into the training set under another name: refused naming both",
     [TRAIN, "--train-data", os.path.join(copied, "toy_train_*.bin"), "--val-data", GOOD_VAL, *SEQ], 1,
     ["toy_train_000090.bin", os.path.basename(VAL_SHARDS[0]), "SHA-256"])
# a validation shard copied in with one header word changed (its tokens the same, its file's
# SHA-256 another): refused as a shard of no known format, never trained on as other data
reworded = path("tov_reworded")
os.makedirs(reworded)
for f in TRAIN_SHARDS:
    shutil.copy(f, reworded)
shutil.copy(VAL_SHARDS[0], os.path.join(reworded, "toy_train_000092.bin"))
set_header_word(os.path.join(reworded, "toy_train_000092.bin"), 100, 1)
for extra in ([], ["--check-data"]):
    case(f"train_gpt{' --check-data' if extra else ''}: a validation shard copied into the training set with a header word changed: "
         "refused naming it", [TRAIN, *extra, "--train-data", os.path.join(reworded, "toy_train_*.bin"), "--val-data", GOOD_VAL,
                               *([] if extra else SEQ)], 1, ["toy_train_000092.bin", "header word 100 is 1"])
linked = path("tov_linked")  # the training set overlaps the validation set in one shard: the same file under two names
os.makedirs(linked)
for f in TRAIN_SHARDS:
    os.symlink(f, os.path.join(linked, os.path.basename(f)))
os.link(VAL_SHARDS[-1], os.path.join(linked, "toy_train_000091.bin"))
case("train_gpt a training set that holds one validation shard (a hard link): refused naming both",
     [TRAIN, "--train-data", os.path.join(linked, "toy_train_*.bin"), "--val-data", GOOD_VAL, *SEQ], 1,
     ["toy_train_000091.bin", os.path.basename(VAL_SHARDS[-1])])
# --check-data reports the same as a problem (exit 1, both files named), every shard otherwise good;
# with --allow-train-on-val it names the shard shared and passes
_, out = case("train_gpt --check-data, a validation shard copied into the training set: refused naming both",
              [TRAIN, "--check-data", "--train-data", os.path.join(copied, "toy_train_*.bin"), "--val-data", GOOD_VAL], 1,
              ["toy_train_000090.bin", os.path.basename(VAL_SHARDS[0]), "SHA-256", "--allow-train-on-val"])
check("train_gpt --check-data, a validation shard copied into the training set: the one problem found",
      "check-data: 1 problem(s) found" in out and "ok " + os.path.join(copied, "toy_train_000090.bin") in out, out[-1500:])
case("train_gpt --check-data, a training set that holds one validation shard (a hard link): refused naming both",
     [TRAIN, "--check-data", "--train-data", os.path.join(linked, "toy_train_*.bin"), "--val-data", GOOD_VAL], 1,
     ["toy_train_000091.bin", os.path.basename(VAL_SHARDS[-1])])
case("train_gpt --check-data, --train-data equal to --val-data: every shard refused naming it twice",
     [TRAIN, "--check-data", "--train-data", GOOD_VAL, "--val-data", GOOD_VAL], 1,
     [f"--train-data shard {VAL_SHARDS[0]} holds the same bytes as --val-data shard {VAL_SHARDS[0]}"])
_, out = case("train_gpt --check-data --allow-train-on-val, a validation shard among the training shards: passes naming it",
              [TRAIN, "--check-data", "--train-data", os.path.join(copied, "toy_train_*.bin"), "--val-data", GOOD_VAL,
               "--allow-train-on-val"], 0, ["toy_train_000090.bin", os.path.basename(VAL_SHARDS[0]), "--allow-train-on-val", "all shards good"])
if shutil.which("nvidia-smi") is None:  # allowed on purpose: the checks pass, and the run stops at the GPU
    case("train_gpt --allow-train-on-val with --train-data equal to --val-data: goes on to the GPU",
         [TRAIN, "--train-data", GOOD_VAL, "--val-data", GOOD_VAL, *SEQ, "--allow-train-on-val"], 1, ["no CUDA GPU"])
    case("train_gpt --allow-train-on-val with a validation shard among the training shards: goes on to the GPU",
         [TRAIN, "--train-data", os.path.join(copied, "toy_train_*.bin"), "--val-data", GOOD_VAL, *SEQ, "--allow-train-on-val"], 1,
         ["no CUDA GPU"])

# ------------------------------------------------------------------------------------ shell scripts: numeric variables in range
# every numeric variable is a whole number within a range: a 0 that would spin a loop (PARALLEL=0)
# or a count so large that building the job list never ends is refused at once, naming it
LC_ENV = dict(os.environ, LOG_DIR=path("lc2"), DATA=os.path.join(T, "sh"))
HUGE = "9" * 25
script_cases = [
    ("learning_compare.sh", LC, LC_ENV, [("PARALLEL", "0"), ("PARALLEL", "100000"), ("RUNS", HUGE), ("RUNS", "0"), ("STEPS", "0"),
                                         ("VAL_EVERY", "0"), ("VAL_TOKENS", HUGE), ("SEED0", "-1"), ("JOBS", "peer:5000")]),
    ("mask_ablation.sh", ["bash", os.path.join(ROOT, "ablations", "mask_ablation.sh")], dict(os.environ, CAMPAIGN=path("camp3")),
     [("RUNS", "0"), ("RUNS", HUGE), ("STEPS", "0"), ("NONCAUSAL", "2"), ("VAL_EVERY", "0"), ("VAL_TOKENS", "x")]),
    ("prefix_ablation.sh", ["bash", os.path.join(ROOT, "ablations", "prefix_ablation.sh")], dict(os.environ, CAMPAIGN=path("camp4")),
     [("PREFIX", "0"), ("RUNS", "0"), ("RUNS", HUGE), ("STEPS", "0")]),
    ("prefix_parity.sh", ["bash", os.path.join(ROOT, "ablations", "prefix_parity.sh")], dict(os.environ, LOG_DIR=path("pp2")),
     [("ROUNDS", "100000"), ("ROUNDS", HUGE)]),
    ("peer_compare.sh", PC, dict(os.environ, LOG_DIR=path("pc2")), [("STEPS", HUGE), ("RECORD_MS", "abc"), ("RECORD_MS", "0")]),
    ("compare_trees.sh", CT + [ROOT], dict(os.environ, LOG_DIR=path("ct2")), [("STEPS", "0"), ("STEPS", "5"), ("ROUNDS", "0"),
                                                                                ("ROUNDS", HUGE)]),
    ("gpu_bench.sh", GB, dict(os.environ, LOG_DIR=path("gb2")), [("STEPS", "0"), ("STEPS", HUGE), ("JOBS", "0"), ("JOBS", "abc")]),
]
for script, cmd, env, tries in script_cases:
    for var, value in tries:
        case(f"{script} {var}={value[:12]}{'...' if len(value) > 12 else ''}", cmd, 2, [var], env=dict(env, **{var: value}))
check("numeric refusals of the shell scripts: nothing written",
      not [p for p in ("lc2", "camp3", "camp4", "pp2", "pc2", "ct2", "gb2") if os.path.exists(path(p))])

# ------------------------------------------------------------------------------------ synthetic_shards, fetch_fineweb: their files
SS = [PY, os.path.join(S, "synthetic_shards.py")]
for name, flags, named in [
    ("--mean-doc inf", ["--mean-doc", "inf"], "--mean-doc"),
    ("--mean-doc nan", ["--mean-doc", "nan"], "--mean-doc"),
    ("--mean-doc 1e400", ["--mean-doc", "1e400"], "--mean-doc"),
    ("--train-tokens 10^12", ["--train-tokens", str(10**12)], "--train-tokens"),
    ("--val-tokens 10^30", ["--val-tokens", str(10**30)], "--val-tokens"),
    ("--shard-tokens 2^40", ["--shard-tokens", str(2**40)], "--shard-tokens"),
    ("--shard-tokens 2 (ten million shards)", ["--shard-tokens", "2"], "--shard-tokens"),
    ("--seed -1", ["--seed", "-1"], "--seed"),
    ("--seed 10^30", ["--seed", str(10**30)], "--seed"),
]:
    case(f"synthetic_shards {name}", SS + [path("ss_out"), *flags], 2, [named])
check("synthetic_shards refusals: nothing written", not os.path.exists(path("ss_out")) and not os.path.exists(path(".ss_out.part")))
SS_PART = path(".ss_busy.part")
os.makedirs(SS_PART)
open(os.path.join(SS_PART, "someone_elses.txt"), "w").write("not synthetic_shards' own\n")
case("synthetic_shards with a .OUT.part folder already there: refused, the folder untouched",
     SS + [path("ss_busy"), "--train-tokens", "1000", "--val-tokens", "100"], 1, [".ss_busy.part", "exists"], keep=[SS_PART])
r = subprocess.run(SS + [path("ss_fine"), "--train-tokens", "3000", "--val-tokens", "200", "--shard-tokens", "1000"], capture_output=True,
                   text=True)
check("synthetic_shards on good values: the folder and its manifest, no staging folder left",
      r.returncode == 0 and os.path.isfile(path("ss_fine", "manifest.tsv")) and not os.path.exists(path(".ss_fine.part")), r.stderr)
r = subprocess.run(SS + [path("ss_new", "deeper", "out"), "--train-tokens", "3000", "--val-tokens", "200"], capture_output=True, text=True)
check("synthetic_shards into folders that do not exist yet: made, as mkdir -p would",
      r.returncode == 0 and os.path.isfile(path("ss_new", "deeper", "out", "manifest.tsv")), r.stdout + r.stderr)
open(path("ss_file"), "w").write("a file, not a folder\n")
case("synthetic_shards under a file", SS + [path("ss_file", "out"), "--train-tokens", "3000"], 1, ["ss_file", "cannot make"],
     keep=[path("ss_file")])
for name, out, words in [("an empty OUT_DIR", "", ["OUT_DIR is empty"]), ("OUT_DIR .", ".", ["not a folder this tool can put in place"]),
                         ("OUT_DIR a symbolic link to a folder", path("ss_link"), ["ss_link", "symbolic link"]),
                         ("a name too long for its staging folder", path("n" * 252), ["at most 249 bytes"]),
                         ("OUT_DIR a non-empty folder reached through ..", path("ss_never", "..", "ss_fine"), ["exists and is not an empty folder"])]:
    if name.startswith("OUT_DIR a symbolic"):
        os.makedirs(path("ss_link_target"))
        os.symlink(path("ss_link_target"), path("ss_link"))
    case(f"synthetic_shards: {name} refused", SS + [out, "--train-tokens", "3000"], (1, 2), words)
check("synthetic_shards: the linked folder left empty", os.listdir(path("ss_link_target")) == [])
check("synthetic_shards: no folder made for a refused path through ..", not os.path.exists(path("ss_never")))
p = subprocess.Popen(SS + [path("ss_nohup"), "--train-tokens", "30000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
time.sleep(0.5)
p.send_signal(signal.SIGHUP)
out, err = p.communicate(timeout=60)
check("synthetic_shards under nohup (SIGHUP ignored): a hang-up does not stop it", p.returncode == 0
      and os.path.isfile(path("ss_nohup", "manifest.tsv")), f"exit {p.returncode}: {err[-300:]}")
os.makedirs(path("ss_empty"))
os.chmod(path("ss_empty"), 0o2750)
r = subprocess.run(SS + [path("ss_empty"), "--train-tokens", "3000", "--val-tokens", "200"], capture_output=True, text=True)
check("synthetic_shards into an empty folder: filled, its mode kept",
      r.returncode == 0 and os.path.isfile(path("ss_empty", "manifest.tsv")) and stat.S_IMODE(os.stat(path("ss_empty")).st_mode) == 0o2750,
      r.stderr + oct(os.stat(path("ss_empty")).st_mode))
for sig, code in ((signal.SIGTERM, 143), (signal.SIGHUP, 129)):
    # (the default disposition restored in the child: under nohup the test's own SIGHUP is ignored,
    # and a child would inherit that)
    p = subprocess.Popen(SS + [path("ss_sig", "new", "out"), "--train-tokens", "400000000"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    deadline = time.time() + 20
    while not os.path.isdir(path("ss_sig", "new", ".out.part")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    check(f"synthetic_shards stopped by {sig.name}: exit {code}, a message, no staging folder or new parent folder left",
          p.returncode == code and sig.name in err and "Traceback" not in err and not os.path.exists(path("ss_sig")),
          f"exit {p.returncode}: {err[-300:]} {os.listdir(T)}")
FW_DIR = path("fw_parts")
os.makedirs(FW_DIR)
FW_PART = os.path.join(FW_DIR, "fineweb_val_000000.bin.part")
FW_TARGET = path("fw_target.txt")
open(FW_TARGET, "w").write("a file the link points at\n")
for kind, make in [("a FIFO", lambda p: os.mkfifo(p)), ("a directory", lambda p: os.makedirs(p)),
                   ("a symbolic link", lambda p: os.symlink(FW_TARGET, p))]:
    make(FW_PART)
    case(f"fetch_fineweb with NAME.part {kind}", FF + ["0", "--out-dir", FW_DIR, "--base-url", "http://127.0.0.1:9/none", "--timeout", "5"],
         1, ["fineweb_val_000000.bin.part", kind], keep=[FW_TARGET])
    (os.rmdir if os.path.isdir(FW_PART) and not os.path.islink(FW_PART) else os.remove)(FW_PART)

# ------------------------------------------------------------------------------------ the scaling model and the collectives' bench
SM = [PY, os.path.join(ROOT, "scripts", "scaling_model.py")]
BWJ = path("bw.json")
with open(BWJ, "w") as f:
    json.dump({"ranks": 2, "results": [{"op": "reduce-scatter fp32", "busbw_GBs": 270.0}, {"op": "all-gather bf16", "busbw_GBs": 250.0}]}, f)
ONE = path("one.jsonl")
with open(ONE, "w") as f:
    f.write(json.dumps({"event": "config", "vocab": 50304, "width": 768, "layers": 12, "hidden": 3072, "world_size": 1}) + "\n")
    f.write(json.dumps({"event": "summary", "median_step_ms": 869.5, "optimizer_ms": 9.0}) + "\n")
case("scaling_model: a good one-GPU log and bandwidth (forecast printed)", SM + ["--one", ONE, "--bandwidth", BWJ], 0, ["8 GPUs of one host"])
case("scaling_model without --one", SM + ["--bandwidth", BWJ], 2, ["--one"])
case("scaling_model --one missing", SM + ["--one", path("none.jsonl"), "--bandwidth", BWJ], 1, ["none.jsonl"])
case("scaling_model --one a folder", SM + ["--one", T, "--bandwidth", BWJ], 1, ["directory"])
case("scaling_model --one a FIFO", SM + ["--one", fifo(path("one.fifo")), "--bandwidth", BWJ], 1, ["FIFO"])
NOSUM = path("nosummary.jsonl")
with open(NOSUM, "w") as f:
    f.write(json.dumps({"event": "config", "vocab": 8, "width": 8, "layers": 2, "hidden": 8}) + "\n")
case("scaling_model --one without a summary (a run that stopped)", SM + ["--one", NOSUM, "--bandwidth", BWJ], 1, ["summary"])
DEEP = path("deep.jsonl")
with open(DEEP, "w") as f:
    f.write("[" * 100000 + "]" * 100000 + "\n")
case("scaling_model --one of JSON nested 100000 deep", SM + ["--one", DEEP, "--bandwidth", BWJ], 1, ["deep.jsonl"])
case("scaling_model --bandwidth not the bench's JSON", SM + ["--one", ONE, "--bandwidth", ONE], 1, ["one.jsonl"])
case("scaling_model --bandwidth twice for one rank count", SM + ["--one", ONE, "--bandwidth", BWJ, BWJ], 1, ["same rank count"])
case("scaling_model --check with the one-GPU log itself: predicted exactly", SM + ["--one", ONE, "--bandwidth", BWJ, "--check", ONE], 0,
     ["0.0%"])
TWO = path("two.jsonl")
with open(TWO, "w") as f:
    f.write(json.dumps({"event": "config", "vocab": 50304, "width": 768, "layers": 12, "hidden": 3072, "world_size": 2}) + "\n")
    f.write(json.dumps({"event": "summary", "median_step_ms": 439.3, "optimizer_ms": 5.3}) + "\n")
case("scaling_model --one a 2-GPU run", SM + ["--one", TWO, "--bandwidth", BWJ], 1, ["--one takes a one-GPU run"])
for links, why in (("abc", "not a number"), ("0", "zero"), ("inf", "infinite"), ("", "empty")):
    case(f"scaling_model --links {why}", SM + ["--one", ONE, "--bandwidth", BWJ, "--links", links], 2, ["--links"])
case("scaling_model --gpus-per-host 0", SM + ["--one", ONE, "--bandwidth", BWJ, "--gpus-per-host", "0"], 2, ["--gpus-per-host"])
case("scaling_model --tolerance 5", SM + ["--one", ONE, "--bandwidth", BWJ, "--tolerance", "5"], 2, ["--tolerance"])
OFF = path("off.jsonl")
with open(OFF, "w") as f:
    f.write(json.dumps({"event": "config", "vocab": 50304, "width": 768, "layers": 12, "hidden": 3072, "world_size": 2,
                        "grad_sync": "end", "grad_exchange": "fp32"}) + "\n")
    f.write(json.dumps({"event": "summary", "median_step_ms": 300.0, "optimizer_ms": 5.3}) + "\n")
case("scaling_model --check a run the model misses by 30%: exit 1, saying so", SM + ["--one", ONE, "--bandwidth", BWJ, "--check", OFF], 1,
     ["more than --tolerance"])
# --check runs not comparable with --one: another card, another model shape; refused naming what
# differs, or with --allow-differ compared and named in the output's first line
for what, extra, named in (("an H200 run against an H100 one", {"gpu": "NVIDIA H200"}, "gpu 'NVIDIA H200' where --one has 'NVIDIA H100'"),
                           ("a 4-layer run against a 12-layer one", {"layers": 4}, "layers 4 where --one has 12")):
    ONE_C, CHK, BWJ_C = path("one_card.jsonl"), path("check_other.jsonl"), path("bw_card.json")
    with open(BWJ_C, "w") as f:  # measured on the --one run's card
        json.dump({"ranks": 2, "device": "NVIDIA H100", "results": [{"op": "reduce-scatter fp32", "busbw_GBs": 270.0},
                                                                     {"op": "all-gather bf16", "busbw_GBs": 250.0}]}, f)
    with open(ONE_C, "w") as f:
        f.write(json.dumps({"event": "config", "vocab": 50304, "width": 768, "layers": 12, "hidden": 3072, "world_size": 1,
                            "gpu": "NVIDIA H100"}) + "\n")
        f.write(json.dumps({"event": "summary", "median_step_ms": 869.5, "optimizer_ms": 9.0}) + "\n")
    with open(CHK, "w") as f:
        f.write(json.dumps(dict({"event": "config", "vocab": 50304, "width": 768, "layers": 12, "hidden": 3072, "world_size": 1,
                                 "gpu": "NVIDIA H100"}, **extra)) + "\n")
        f.write(json.dumps({"event": "summary", "median_step_ms": 869.5, "optimizer_ms": 9.0}) + "\n")
    case(f"scaling_model --check {what}: refused naming the difference", SM + ["--one", ONE_C, "--bandwidth", BWJ_C, "--check", CHK],
         1, ["check_other.jsonl", named])
    key = next(iter(extra))
    _, out = case(f"scaling_model --check {what} --allow-differ {key}: compared, the first line names it",
                     SM + ["--one", ONE_C, "--bandwidth", BWJ_C, "--check", CHK, "--allow-differ", key], 0, [named])
    check(f"scaling_model --allow-differ {key}: the output's first line is the warning",
          out.startswith("scaling_model: warning: compared across a difference") and named in out.split("\n")[0], out[:300])
# a --bandwidth file measured on another card than the runs' (its "device" against their "gpu"):
# the predicted exchange would be that card's, so --check refuses it naming file, field and both
# cards, or with --allow-differ gpu compares and names it in the output's first line; a file that
# names no card is refused alike (its card unknown). A forecast alone (no --check) compares nothing.
for what, bw in (("measured on an H200 for H100 runs", {"device": "NVIDIA H200"}), ("that names no card", {})):
    BWJ_O = path("bw_other.json")
    with open(BWJ_O, "w") as f:
        json.dump(dict(bw, ranks=4, results=[{"op": "reduce-scatter fp32", "busbw_GBs": 270.0},
                                             {"op": "all-gather bf16", "busbw_GBs": 250.0}]), f)
    named = f"device {bw.get('device', '(absent)')!r} where the runs have gpu 'NVIDIA H100'"
    case(f"scaling_model --check with a bandwidth file {what}: refused naming the file, field and both cards",
         SM + ["--one", ONE_C, "--bandwidth", BWJ_C, BWJ_O, "--check", ONE_C], 1, ["bw_other.json", named])
    _, out = case(f"scaling_model --check with a bandwidth file {what}, --allow-differ gpu: compared, the first line names it",
                  SM + ["--one", ONE_C, "--bandwidth", BWJ_O, "--check", ONE_C, "--allow-differ", "gpu"], 0, [named])
    check(f"scaling_model a bandwidth file {what}, --allow-differ gpu: the output's first line names the file and both cards",
          out.startswith("scaling_model: warning: compared across a difference") and "bw_other.json " + named in out.split("\n")[0],
          out[:300])
    case(f"scaling_model a forecast (no --check) with a bandwidth file {what}: printed",
         SM + ["--one", ONE_C, "--bandwidth", BWJ_O], 0, ["8 GPUs of one host"])
BSM = [PY, os.path.join(ROOT, "bench", "bwd_schedule_model.py")]
for args, flag in ((["--overhead", "inf"], "--overhead"), (["--delay", "nan"], "--delay"), (["--sms", "0"], "--sms"),
                   (["--T", "-128"], "--T"), (["--noise", "nan"], "--noise")):
    case(f"bwd_schedule_model {' '.join(args)}", BSM + args, 2, [flag])
CB = [PY, os.path.join(ROOT, "bench", "collective_bandwidth.py")]
# a bandwidth file that measures one collective twice: which would the model take? refused naming
# the file and the entry (the last one was taken before); two files of one rank count are named
BW_TWICE = path("bw_twice.json")
with open(BW_TWICE, "w") as f:
    json.dump({"ranks": 2, "results": [{"op": "reduce-scatter fp32", "busbw_GBs": 270.0}, {"op": "all-gather bf16", "busbw_GBs": 250.0},
                                       {"op": "reduce-scatter fp32", "busbw_GBs": 2.0}]}, f)
case("scaling_model --bandwidth measuring reduce-scatter twice", SM + ["--one", ONE, "--bandwidth", BW_TWICE], 1,
     ["bw_twice.json", "results[2]", "reduce-scatter"])
shutil.copy(BWJ, path("bw_copy.json"))
case("scaling_model two --bandwidth files of one rank count: both named", SM + ["--one", ONE, "--bandwidth", BWJ, path("bw_copy.json")], 1,
     ["bw.json", "bw_copy.json"])
case("scaling_model --links with an empty item", SM + ["--one", ONE, "--bandwidth", BWJ, "--links", "400,,100"], 2, ["--links"])
case("scaling_model --check without a run", SM + ["--one", ONE, "--bandwidth", BWJ, "--check"], 2, ["--check"])
case("collective_bandwidth --mb 0", CB + ["--mb", "0"], 2, ["--mb"])
case("collective_bandwidth --iters 0", CB + ["--iters", "0"], 2, ["--iters"])
case("collective_bandwidth --json over an existing file", CB + ["--json", BWJ], 1, ["bw.json"], keep=[BWJ])

print("\nWhat was tried and how it ended:")
for line in summary:
    print("  " + line)
shutil.rmtree(T, ignore_errors=True)
finish("hostile")
