"""scripts/rank_balance.py, the ranks' attention work from the shards: its counts against a brute
force written here on its own (each query's kept keys counted one by one; every assignment of a
step's sequences to the ranks tried), on small shards of scripts/synthetic_shards.py; and bad input
refused with a message naming the flag or file."""
import itertools
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from harness import check, finish  # noqa: E402
from tool_errors import require  # noqa: E402
require("numpy", suite="rank-balance")
import numpy as np  # noqa: E402

SCRIPT = os.path.join(ROOT, "scripts", "rank_balance.py")
T, BLOCKS, S = 512, 1, 8  # tokens a sequence, window blocks (W = 128), sequences a step
W = 128 * BLOCKS


def tool(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


tmp = tempfile.mkdtemp(prefix="rank_balance_")
shards = os.path.join(tmp, "synth")
subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "synthetic_shards.py"), shards, "--train-tokens", "60000",
                "--val-tokens", "5000", "--shard-tokens", "30000", "--mean-doc", "150", "--seed", "3"], check=True,
               capture_output=True)
pattern = os.path.join(shards, "synth_train_*.bin")

# the brute force: the sequences in data/dataloader.h's order, each query's kept keys one by one
stream = []
for f in sorted(os.listdir(shards)):
    if f.startswith("synth_train_"):
        tok = np.fromfile(os.path.join(shards, f), dtype="<u2", offset=1024)
        stream += [tok[k * T:k * T + T] for k in range((len(tok) - 1) // T)]


def pairs(seq):
    total, start = 0, 0
    for q in range(len(seq)):
        if seq[q] == 50256:
            start = q
        total += q - max(start, q - W + 1) + 1
    return total


steps = range(11, 31)
work = {k: pairs(stream[k % len(stream)]) for s in steps for k in range(S * (s - 1), S * s)}
want = {}
for n in (1, 2, 4, 8):
    as_run, best = [], []
    for s in steps:
        v = [work[S * (s - 1) + i] for i in range(S)]
        mean = sum(v) / n
        as_run.append(max(sum(v[m * n + r] for m in range(S // n)) for r in range(n)) / mean - 1)
        if n < S:  # every assignment of the step's sequences to n ranks of S / n each
            lowest = min(max(sum(v[i] for i in range(S) if perm[i] == r) for r in range(n))
                         for perm in set(itertools.permutations([i // (S // n) for i in range(S)])))
        else:  # one sequence a rank: whatever the assignment, the longest sequence's rank is last
            lowest = max(v)
        best.append(lowest / mean - 1)
    want[n] = [100 * np.median(as_run), 100 * np.mean(as_run), 100 * np.median(best), 100 * np.mean(best)]

# the script's own functions, exactly: each sequence's pairs, and each step's best split
import rank_balance  # noqa: E402
wrong = [k for k in work if rank_balance.window_pairs(stream[k % len(stream)], W) != work[k]]
check("every sequence's kept pairs equal the brute force's, exactly", not wrong, str(wrong[:5]))
wrong = []
for n in (2, 4):
    for s in steps:
        v = [work[S * (s - 1) + i] for i in range(S)]
        brute = min(max(sum(v[i] for i in range(S) if perm[i] == r) for r in range(n))
                    for perm in set(itertools.permutations([i // (S // n) for i in range(S)])))
        if rank_balance.best_split(v, n) != brute:
            wrong.append((n, s))
check("every step's best split equals the brute force's, exactly", not wrong, str(wrong[:5]))
# small numbers with zeros and repeats, where groups of different sizes can have equal sums
rng = np.random.default_rng(7)
wrong = []
for trial in range(400):
    k, n = ((6, 2), (6, 3), (8, 2), (8, 4))[trial % 4]
    v = [int(x) for x in rng.integers(0, 10, k)]
    brute = min(max(sum(v[i] for i in range(k) if perm[i] == r) for r in range(n))
                for perm in set(itertools.permutations([i // (k // n) for i in range(k)])))
    if rank_balance.best_split(v, n) != brute:
        wrong.append((n, v))
check("best split of small numbers with zeros and repeats equals the brute force's", not wrong, str(wrong[:3]))



# --count tiles: for each block of 128 queries, the key blocks from the lowest key any of its
# queries keeps (block-granular window: q / 128 - k / 128 < blocks) up to the block itself
def tiles(seq, blocks):
    total, start = 0, 0
    for qb in range(len(seq) // 128):
        lo = None
        for q in range(qb * 128, qb * 128 + 128):
            if seq[q] == 50256:
                start = q
            first = max(start, (q // 128 - blocks + 1) * 128)
            lo = first if lo is None else min(lo, first)
        total += qb - lo // 128 + 1
    return total


wrong = [(k, b) for b in (1, 2, 3) for k in list(work)[:48] if rank_balance.window_tiles(stream[k % len(stream)], b) != tiles(stream[k % len(stream)], b)]
check("every sequence's visited tiles equal the brute force's, at windows of 1, 2 and 3 blocks", not wrong, str(wrong[:5]))
one_doc = np.full(T, 7, dtype=np.uint16)
check("one document: each query block visits its own and the window's earlier blocks",
      rank_balance.window_tiles(one_doc, 2) == 1 + 2 + 2 + 2 and rank_balance.window_tiles(one_doc, 8) == 1 + 2 + 3 + 4)
every_block = one_doc.copy()
every_block[::128] = 50256
check("a document starting at every block: one tile a block", rank_balance.window_tiles(every_block, 8) == T // 128)
tile_work = {k: tiles(stream[k % len(stream)], 2) for k in work}
rc, out = tool(pattern, "--seq-len", str(T), "--window-blocks", "2", "--gpus", "2", "--count", "tiles")
m = re.search(r"^\s*2\s+4\s+([0-9.]+)%", out, re.M)
v2 = []
for s_ in steps:
    v = [tile_work[S * (s_ - 1) + i] for i in range(S)]
    v2.append(max(sum(v[m_ * 2 + r] for m_ in range(S // 2)) for r in range(2)) / (sum(v) / 2) - 1)
check("--count tiles: the 2-GPU excess as the brute force counts it", rc == 0 and "attention tiles" in out and m is not None
      and abs(float(m.group(1)) - 100 * np.median(v2)) <= 0.006, out)

rc, out = tool(pattern, "--seq-len", str(T), "--window-blocks", str(BLOCKS), "--gpus", "1,2,4,8", "--attention-ms", "100")
check("runs on small shards", rc == 0, out)
got = {}
for line in out.splitlines():
    m = re.match(r"\s*(\d+)\s+(\d+)\s+([0-9.]+)%\s+([0-9.]+)%\s+([0-9.]+)%\s+([0-9.]+)%\s+([0-9.]+), ([0-9.]+)$", line)
    if m:
        got[int(m.group(1))] = [float(m.group(i)) for i in range(3, 9)]
check("a row for each GPU count", sorted(got) == [1, 2, 4, 8], out)
for n in sorted(got):
    # the printed shares are rounded to 0.01%, the ms to 0.01
    check(f"{n} GPU(s): the slowest rank's excess, as run and at the best split, as the brute force counts",
          all(abs(g - w) <= 0.006 for g, w in zip(got[n][:4], want[n])), f"got {got[n][:4]}, want {want[n]}")
    check(f"{n} GPU(s): the excess in ms is the attention's ms / N times the median share",
          abs(got[n][4] - 100 / n * want[n][0] / 100) <= 0.006 and abs(got[n][5] - 100 / n * want[n][2] / 100) <= 0.006, str(got[n]))
check("one GPU: no excess", got.get(1, [1])[:4] == [0.0, 0.0, 0.0, 0.0], str(got.get(1)))
check("the best split is never worse than the run's", all(got[n][2] <= got[n][0] + 1e-9 for n in got))
check("with one sequence a rank the best split is the run's", got.get(8, [0, 0, 1, 1])[0] == got.get(8, [0, 0, 1, 1])[2])
check("the sequences' work differs (the shards are not trivial)", want[2][0] > 0.1, str(want))

# shards in the trainer's order (data/shard.h sorts the names' bytes): a name that is not UTF-8
# sorts after U+E000's bytes, though before it as a Python str; one sequence a shard, the two
# shards' documents different, so the first step's work says which shard came first
odd = os.path.join(tmp, "odd")
os.makedirs(odd)
one_doc = np.full(T + 1, 7, dtype=np.uint16)
one_doc[0] = 50256
many_docs = one_doc.copy()
many_docs[::16] = 50256
for name, tok in ((os.fsencode(os.path.join(odd, "o_")) + b"\xff.bin", many_docs), (os.path.join(odd, "o_\ue000.bin"), one_doc)):
    with open(name, "wb") as f:
        f.write(np.array([20240520, 1, len(tok)] + [0] * 253, dtype="<i4").tobytes() + tok.astype("<u2").tobytes())
rc, out = tool(os.path.join(odd, "o_*.bin"), "--seq-len", str(T), "--window-blocks", str(BLOCKS), "--seqs-per-step", "1",
               "--gpus", "1", "--steps", "1-1")
m = re.search(r"attention pairs: mean ([0-9.e+]+)", out)
check("shards in the trainer's byte order: the first step reads the U+E000 shard",
      rc == 0 and m is not None and abs(float(m.group(1)) / rank_balance.window_pairs(one_doc[:T], W) - 1) < 1e-3, out)  # (4 digits printed)

# bad input: a message naming the flag or file, exit 1 or 2, never a traceback
bad_magic = os.path.join(tmp, "bad_train_000001.bin")
with open(bad_magic, "wb") as f:
    f.write(b"\0" * 2048)
short = os.path.join(tmp, "short_train_000001.bin")
with open(short, "wb") as f:
    f.write(np.array([20240520, 1, 10] + [0] * 253, dtype="<i4").tobytes() + np.full(10, 50256, dtype="<u2").tobytes())
for name, args, code, words in [
    ("no shard matches", [os.path.join(tmp, "none_*.bin")], 1, ["no shard matches"]),
    ("a shard with another magic", [bad_magic], 1, ["bad_train_000001.bin", "not a token shard"]),
    ("shards too short for one sequence", [short], 1, ["no shard holds a sequence"]),
    ("a folder as the shard", [tmp], 1, [os.path.basename(tmp)]),
    ("--steps backwards", [pattern, "--steps", "30-11"], 1, ["--steps"]),
    ("--steps not numbers", [pattern, "--steps", "a-b"], 1, ["--steps"]),
    ("--steps from 0", [pattern, "--steps", "0-5"], 1, ["--steps"]),
    ("--steps with digits that are not ASCII", [pattern, "--steps", "1-\u00b2"], 1, ["--steps"]),
    ("--gpus not dividing the step", [pattern, "--gpus", "3"], 2, ["--gpus", "does not divide"]),
    ("--gpus not a number", [pattern, "--gpus", "two"], 2, ["--gpus"]),
    ("--gpus twice", [pattern, "--gpus", "2,2"], 2, ["--gpus", "twice"]),
    ("--window-blocks 0", [pattern, "--window-blocks", "0"], 2, ["--window-blocks"]),
    ("--seq-len 0", [pattern, "--seq-len", "0"], 2, ["--seq-len"]),
    ("--seqs-per-step 17", [pattern, "--seqs-per-step", "17"], 2, ["--seqs-per-step"]),
    ("--attention-ms negative", [pattern, "--attention-ms", "-1"], 2, ["--attention-ms"]),
    ("--attention-ms nan", [pattern, "--attention-ms", "nan"], 2, ["--attention-ms"]),
    ("--count tiles with --seq-len not a multiple of 128", [pattern, "--count", "tiles", "--seq-len", "500"], 2, ["--count", "128"]),
    ("--count of another kind", [pattern, "--count", "flops"], 2, ["--count"]),
    ("no arguments", [], 2, ["train"]),
]:
    rc, out = tool(*args)
    check(f"refused: {name} (exit {code}, naming it)", rc == code and all(w in out for w in words) and "Traceback" not in out,
          f"exit {rc}: {out[-300:]}")
r = subprocess.run([sys.executable, SCRIPT, pattern, "--seq-len", str(T)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                   pass_fds=(), close_fds=True, preexec_fn=lambda: os.close(1))
check("stdout closed: exit 0, no traceback", r.returncode == 0 and "Traceback" not in r.stderr, f"exit {r.returncode}: {r.stderr[-300:]}")
finish("rank-balance")
