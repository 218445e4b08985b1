"""The parts of the PyTorch peer (peer/torch_peer.py) that need no GPU, and the synthetic shards
of scripts/synthetic_shards.py:
  - the block classification its FlexAttention mask is built from, against the dense mask of
    docs/masks.md on random documents (exact: both are boolean);
  - the data order (data/dataloader.h's rule) and its schedules (train_gpt's, hand-computed);
  - on N ranks: each rank's training and validation sequences, against train_gpt's own functions
    (data/dataloader.h, compiled here into a small program when a C++ compiler is present), and
    Muon's share-out of the matrices (the record's: by size, matrix i of a size on rank i % N);
  - bad input refused with a one-line message naming the file or flag, before PyTorch is needed,
    under torchrun's variables too: a rank count that does not divide the batch, bad variables,
    and on the ranks but 0 no message at all (rank 0 gives it);
  - synthetic shards: the format, the manifest (train_gpt --check-data reads them), the document
    lengths, a refused non-empty folder;
  - peer/peer_compare.sh's variables refused out of range (exit 2, naming the variable), before
    anything is built or written.

    python3 tests/test_torch_peer.py [TRAIN_GPT]
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require; require("numpy", suite="torch-peer")  # noqa: E402,E702
import numpy as np  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(root, "peer"))
sys.path.insert(0, os.path.join(root, "scripts"))
from harness import check, finish  # noqa: E402
import torch_peer as peer  # noqa: E402

train_gpt = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "train_gpt")
PEER = [sys.executable, os.path.join(root, "peer", "torch_peer.py")]
SYNTH = [sys.executable, os.path.join(root, "scripts", "synthetic_shards.py")]


def dense_keep(docs, window, bi):
    """docs/masks.md, written out per pair: causal, same document, block window."""
    T = docs.size
    q, k = np.arange(T)[:, None], np.arange(T)[None, :]
    keep = (k <= q) & (docs[:, None] == docs[None, :])
    if window:
        d = q // 128 - k // 128
        keep &= (np.abs(d) if bi else d) < window
    return keep


# --- the block classification, exact against the dense mask
rng = np.random.default_rng(7)
bad = 0
cases = 0
for case in range(120):
    T = 128 * int(rng.integers(1, 13))
    kind = case % 4
    if kind == 0:
        tokens = rng.integers(0, 50256, T)  # no document boundary at all
    else:
        mean = [None, 60, 300, 2000][kind]
        tokens = np.where(rng.random(T) < 1 / mean, peer.BOS, rng.integers(0, 50256, T))
        if case % 8 == 1:
            tokens[::128] = peer.BOS  # boundaries on block edges
    docs = peer.doc_ids(tokens)
    for window in (0, 1, 2, int(rng.integers(1, 14))):
        for bi in (False, True):
            any_, full = peer.block_classes(docs, window, bi, T)
            keep = dense_keep(docs, window, bi).reshape(T // 128, 128, T // 128, 128)
            want_any, want_full = keep.any(axis=(1, 3)), keep.all(axis=(1, 3))
            cases += 1
            if not (np.array_equal(any_, want_any) and np.array_equal(full, want_full)):
                bad += 1
                if bad <= 3:
                    print(f"case {case} T {T} window {window} bi {bi}: any differs at {np.argwhere(any_ != want_any)[:3].tolist()}, "
                          f"full at {np.argwhere(full != want_full)[:3].tolist()}")
check(f"block classes exact against the dense mask ({cases} masks)", bad == 0, f"{bad} differ")
d = peer.doc_ids(np.array([5, peer.BOS, 7, peer.BOS, peer.BOS, 9]))
check("document ids count the BOS tokens at or before each position", d.tolist() == [0, 1, 1, 2, 3, 3], str(d.tolist()))

# --- schedules: train_gpt's (model/config.h, the cooldown and warm-up rounded half away from zero)
lr, mom, win = peer.schedules(1480)
check("1480 steps: lr 1 until step 880, then (1480 - s) / 600", lr(879) == 1.0 and lr(880) == 1.0 and lr(1180) == 0.5 and lr(1479) == 1 / 600)
check("1480 steps: momentum 0.85 -> 0.95 over 300 steps", mom(0) == 0.85 and abs(mom(150) - 0.90) < 1e-15 and mom(300) == 0.95 and mom(1000) == 0.95)
check("1480 steps: window 1 block at the start, 14 at the end", win(0) == 1 and win(1480) == 14 and win(740) == 7, f"{win(0)} {win(740)} {win(1480)}")
lr, mom, win = peer.schedules(111)  # warm-up 300 * 111 / 1480 = 22.5 -> 23 (std::lround), cooldown 45
check("111 steps: warm-up 22.5 rounds to 23, cooldown 45", abs(mom(22) - (0.85 + 0.1 * 22 / 23)) < 1e-15 and mom(23) == 0.95 and lr(65) == 1.0
      and lr(66) == 1.0 and abs(lr(67) - 44 / 45) < 1e-15)
lr, mom, win = peer.schedules(150)  # cooldown 60.8 -> 61, warm-up 30.4 -> 30
check("150 steps: cooldown 61, warm-up 30", lr(89) == 1.0 and abs(lr(90) - 60 / 61) < 1e-15 and mom(30) == 0.95 and mom(29) < 0.95)


# --- on N ranks: the data order, the validation split and Muon's share-out (no PyTorch needed)
def peer_order(spp, world, rank, steps):
    return [peer.train_sequence(s, m, rank, world, spp) for s in range(steps) for m in range(spp // world)]


ok = True
for spp in (8, 12):
    for world in [w for w in range(1, spp + 1) if spp % w == 0]:
        per_step = [sorted(peer.train_sequence(s, m, r, world, spp) for r in range(world) for m in range(spp // world))
                    for s in range(6)]
        ok &= all(seqs == list(range(spp * s, spp * s + spp)) for s, seqs in enumerate(per_step))
check("on N ranks, step s takes sequences 8s ... 8s + 7, each once, whatever N divides the batch", ok)
check("one rank takes 8s + m at micro-step m (the one-GPU order)", peer_order(8, 1, 0, 3) == list(range(24)))
check("rank r of N at micro-step m takes 8s + m N + r (README's example: rank 1 of 2, step 3, micro-step 2 is 29)",
      peer.train_sequence(3, 2, 1, 2, 8) == 29 and peer_order(8, 4, 3, 2) == [3, 7, 11, 15])
val = {w: [list(peer.val_sequences(10, r, w)) for r in range(w)] for w in (1, 2, 3, 4, 8)}
check("validation: the first val_tokens / seq_len sequences, round-robin over the ranks, each once",
      all(sorted(sum(v, [])) == list(range(10)) for v in val.values()) and val[3] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]])

# train_gpt's own functions (data/dataloader.h), compiled into a small program that prints them
cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
DRIVER = r"""
#include "data/dataloader.h"
#include <cstdio>
int main() {
  for (int spp : {8, 12, 1})
    for (int world = 1; world <= spp; world++) {
      if (spp % world) continue;
      for (int rank = 0; rank < world; rank++) {
        data::TrainSchedule ts{spp, world, rank};
        std::printf("train %d %d %d %d", spp, world, rank, ts.micro_steps());
        for (int step = 0; step < 7; step++)
          for (int m = 0; m < ts.micro_steps(); m++) std::printf(" %llu", (unsigned long long)ts.sequence_index(step, m));
        std::printf("\n");
      }
    }
  for (int world : {1, 2, 3, 4, 8})
    for (int rank = 0; rank < world; rank++)
      for (unsigned long long tokens : {640ull, 645ull, 64ull * 7, 64ull}) {
        std::printf("val %d %d %llu", world, rank, tokens);
        for (auto k : data::val_sequences(tokens, 64, world, rank)) std::printf(" %llu", (unsigned long long)k);
        std::printf("\n");
      }
}
"""
if cxx:
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "order.cpp"), os.path.join(tmp, "order")
        with open(src, "w") as f:
            f.write(DRIVER)
        r = subprocess.run([cxx, "-std=c++17", "-I", root, src, os.path.join(root, "data", "dataloader.cpp"), "-o", exe, "-lcrypto"],
                           capture_output=True, text=True, timeout=120)
        built = check("train_gpt's data order (data/dataloader.h) compiles into a program", r.returncode == 0, r.stderr[-800:])
        out = subprocess.run([exe], capture_output=True, text=True, timeout=60).stdout.splitlines() if built else []
    want = []
    for spp in (8, 12, 1):
        for world in [w for w in range(1, spp + 1) if spp % w == 0]:
            for rank in range(world):
                want.append(" ".join(map(str, ["train", spp, world, rank, spp // world] + peer_order(spp, world, rank, 7))))
    for world in (1, 2, 3, 4, 8):
        for rank in range(world):
            for tokens in (640, 645, 64 * 7, 64):
                want.append(" ".join(map(str, ["val", world, rank, tokens] + list(peer.val_sequences(tokens // 64, rank, world)))))
    bad = [(g, w) for g, w in zip(out, want) if g != w]
    check(f"each rank's training and validation sequences equal train_gpt's ({len(want)} rank/world/batch cases)",
          built and len(out) == len(want) and not bad, f"{len(out)} lines against {len(want)}; first difference {bad[:1]}")
else:
    print("note: no C++ compiler: the data order was not compared with data/dataloader.h's")

# Muon's share-out: the speedrun's matrices (per block Wq, Wk, Wv, Wo, Wfc, Wproj, nn.Linear's
# [out][in]), grouped by size, the i-th of a size on rank i % N, exchanged in rounds of N
C, HID = 768, 3072
speedrun = [C * C] * 4 + [HID * C] * 2
speedrun = speedrun * 12
for world in (1, 2, 4, 8):
    plan = peer.muon_plan(speedrun, world)
    owned = [peer.muon_owned(plan, r) for r in range(world)]
    square = [i for i, n in enumerate(speedrun) if n == C * C]
    mlp = [i for i, n in enumerate(speedrun) if n == HID * C]
    rule = all(group[j] in owned[j % world] for group in (square, mlp) for j in range(len(group)))
    check(f"Muon on {world} rank(s): every matrix orthogonalised by one rank, the i-th of its size by rank i % {world}, "
          f"{72 // world} each", sorted(sum(owned, [])) == list(range(72)) and rule and all(len(o) == 72 // world for o in owned))
    check(f"Muon on {world} rank(s): two sizes, {48 // world} + {24 // world} full rounds of {world} in parameter order",
          [n for n, _ in plan] == [C * C, HID * C] and [len(r) for _, r in plan] == [48 // world, 24 // world]
          and all(None not in x for _, rounds in plan for x in rounds) and plan[0][1][0] == square[:world])
plan = peer.muon_plan(speedrun, 4)
check("Muon on 4 ranks: Wq, Wk, Wv, Wo of every block on ranks 0-3; Wfc and Wproj of block b on ranks 2b mod 4, 2b + 1 mod 4",
      [[r for r in range(4) if 6 * b + j in peer.muon_owned(plan, r)][0] for b in range(12) for j in range(6)]
      == [x for b in range(12) for x in (0, 1, 2, 3, 2 * b % 4, (2 * b + 1) % 4)])
tiny = ([128 * 128] * 4 + [512 * 128] * 2) * 2  # 2 layers: 8 square matrices, 4 of the MLP
plan = peer.muon_plan(tiny, 8)
check("Muon, a size with fewer matrices than ranks (4 on 8 ranks): one round, the ranks without one send zeros",
      plan == [(128 * 128, [[0, 1, 2, 3, 6, 7, 8, 9]]), (512 * 128, [[4, 5, 10, 11, None, None, None, None]])]
      and peer.muon_owned(plan, 5) == [7] and peer.muon_owned(plan, 1) == [1, 5], str(plan))

# torchrun's variables
R = peer.ranks_from_env
r0, r2 = R({}), R({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
r3 = R({"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "4"})
check("torchrun's variables: none is one process; LOCAL_WORLD_SIZE defaults to WORLD_SIZE",
      (r0.rank, r0.local_rank, r0.world, r0.local_world, r0.up) == (0, 0, 1, 1, False)
      and (r2.rank, r2.local_rank, r2.world, r2.local_world) == (2, 0, 4, 2) and (r3.local_rank, r3.local_world) == (3, 4))
for env, needle in (({"WORLD_SIZE": "2", "RANK": "x", "LOCAL_RANK": "0"}, "whole numbers"),
                    ({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0"}, "not a rank"),
                    ({"WORLD_SIZE": "0", "RANK": "0", "LOCAL_RANK": "0"}, "not a rank"),
                    ({"WORLD_SIZE": "2", "RANK": "1"}, "whole numbers")):
    try:
        R(env)
        check(f"torchrun's variables {env} refused", False)
    except peer.PeerError as e:
        check(f"torchrun's variables {env} refused", needle in str(e), str(e))


def write_shard(path, tokens, magic=peer.MAGIC, count=None):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, 1, len(tokens) if count is None else count)
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


with tempfile.TemporaryDirectory() as tmp:
    # --- the data order: windows of T + 1 at k * T, tails skipped, shards in order, cycled
    a = np.arange(0, 1000) % 50000
    b = np.arange(1000, 1500) % 50000
    c = np.arange(2000, 2100)  # shorter than one window: holds no sequence
    write_shard(os.path.join(tmp, "s_000001.bin"), a)
    write_shard(os.path.join(tmp, "s_000002.bin"), c)
    write_shard(os.path.join(tmp, "s_000003.bin"), b)
    T = 128
    st = peer.TokenStream(os.path.join(tmp, "s_*.bin"), "--train-data", T, 50257, cycle=True)
    want = [a[k * T:k * T + T + 1] for k in range(len(a) // T if len(a) % T else len(a) // T - 1)]
    want += [b[k * T:k * T + T + 1] for k in range((len(b) - 1) // T)]
    got = [st.sequence(k) for k in range(len(want))]
    check("sequence k is the (T + 1)-window at k * T of its shard, tails and short shards skipped",
          len(want) == 10 and all(np.array_equal(g, w) for g, w in zip(got, want)), f"{len(want)} sequences")
    check("the stream cycles", np.array_equal(st.sequence(len(want) + 3), want[3]))
    # shards in the trainer's order, which sorts the names' bytes (data/shard.h): a name that is not
    # UTF-8 (b"\\xff", which Python holds as "\\udcff") sorts after U+E000's bytes there, before it as str
    odd = os.path.join(tmp, "odd")
    os.makedirs(odd)
    write_shard(os.fsencode(os.path.join(odd, "o_")) + b"\xff.bin", a)
    write_shard(os.path.join(odd, "o_\ue000.bin"), b)
    ost = peer.TokenStream(os.path.join(odd, "o_*.bin"), "--train-data", T, 50257, cycle=True)
    check("shards sorted by their names' bytes, as the trainer sorts them",
          [os.fsencode(os.path.basename(f)) for f in ost.files] == [b"o_\xee\x80\x80.bin", b"o_\xff.bin"]
          and np.array_equal(ost.sequence(0), b[:T + 1]), str([os.fsencode(f) for f in ost.files]))
    vs = peer.TokenStream(os.path.join(tmp, "s_*.bin"), "--val-data", T, 50257, cycle=False)
    try:
        vs.sequence(len(want))
        check("the validation stream does not cycle", False)
    except peer.PeerError as e:
        check("the validation stream does not cycle", "past the end" in str(e), str(e))

    # --- bad input: one line naming the file or flag, exit 1 (2 for flags), before any GPU work
    def refused(name, args, needle, code=1):
        r = subprocess.run(PEER + args, capture_output=True, text=True, timeout=60)
        ok = r.returncode == code and needle in r.stderr and "Traceback" not in r.stderr
        check(f"refused: {name}", ok, f"rc {r.returncode}: {r.stderr.strip()[-300:]}")

    good = os.path.join(tmp, "good")
    os.mkdir(good)
    write_shard(os.path.join(good, "g_val_000000.bin"), np.arange(600) % 50257)
    write_shard(os.path.join(good, "g_train_000001.bin"), np.arange(600) % 50257)
    flags = ["--seq-len", "128", "--val-tokens", "128", "--val-data", os.path.join(good, "g_val_*.bin")]
    badm = os.path.join(tmp, "badmagic_000001.bin")
    write_shard(badm, np.arange(600), magic=123)
    refused("a shard with the wrong magic", ["--train-data", badm] + flags, f"{badm}: bad magic 123")
    badn = os.path.join(tmp, "badcount_000001.bin")
    write_shard(badn, np.arange(600), count=700)
    refused("a shard shorter than its header says", ["--train-data", badn] + flags, f"{badn}: header says 700 tokens")
    badt = os.path.join(tmp, "badtoken_000001.bin")
    write_shard(badt, np.full(600, 50300))
    refused("a token id out of range", ["--train-data", badt] + flags, f"{badt}: token id 50300 out of range")
    refused("no shard matches", ["--train-data", os.path.join(tmp, "none_*.bin")] + flags, "--train-data")
    refused("--val-tokens beyond the validation shards", ["--train-data", os.path.join(good, "g_train_*.bin"), "--seq-len", "128",
                                                          "--val-tokens", "100000", "--val-data", os.path.join(good, "g_val_*.bin")],
            "--val-tokens 100000")
    log = os.path.join(tmp, "run.txt")
    with open(log, "w") as f:
        f.write("an earlier run\n")
    refused("an existing log", ["--train-data", os.path.join(good, "g_train_*.bin"), "--log-file", log] + flags, f"{log} exists")
    check("the existing log is left as it was", open(log).read() == "an earlier run\n")
    refused("--layers odd", ["--layers", "3"], "--layers 3", code=2)
    refused("--seq-len not a multiple of 128", ["--seq-len", "1000"], "--seq-len 1000", code=2)
    refused("--heads not dividing --width", ["--heads", "5"], "--heads 5", code=2)
    refused("--steps 0", ["--steps", "0"], "--steps 0", code=2)

    # --- under torchrun's variables: refused before any GPU work, rank 0 alone saying why
    def ranked(args, rank, world, **extra):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
        env.update(extra)
        return subprocess.run(PEER + args, capture_output=True, text=True, timeout=60, env=env)

    r = ranked([], 0, 3)
    want = ("--seqs-per-step 8: the global batch of 8 sequences does not split over 3 GPUs (WORLD_SIZE); "
            "GPU counts that work: 1, 2, 4, 8")
    check("3 ranks for a batch of 8: refused (exit 2), naming the counts that work", r.returncode == 2 and want in r.stderr
          and "Traceback" not in r.stderr, f"rc {r.returncode}: {r.stderr[-300:]}")
    r = ranked([], 1, 3)
    check("3 ranks for a batch of 8: rank 1 exits 2 without a message", r.returncode == 2 and r.stderr == "" and r.stdout == "",
          f"rc {r.returncode}: {r.stderr[-300:]}")
    r = ranked(["--seqs-per-step", "12"], 0, 8)
    check("8 ranks for a batch of 12: refused, naming 1, 2, 3, 4, 6, 12",
          r.returncode == 2 and "GPU counts that work: 1, 2, 3, 4, 6, 12" in r.stderr, r.stderr[-300:])
    r = ranked([], 0, 2, RANK="one")
    check("a RANK that is not a number: one line, exit 1", r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
          and "RANK, LOCAL_RANK and WORLD_SIZE must be whole numbers" in r.stderr, r.stderr[-300:])
    for fault in ("2:3", "1:0", "1", "a:b", "1:2:3"):
        r = ranked(["--fault", fault], 0, 2)
        check(f"--fault {fault} on 2 ranks refused (exit 2)", r.returncode == 2 and f"--fault {fault}: want RANK:STEP" in r.stderr,
              r.stderr[-300:])
    bad_train = ["--train-data", badm] + flags
    r0, r1 = ranked(bad_train, 0, 2), ranked(bad_train, 1, 2)
    check("a bad shard on 2 ranks: rank 0 names it (exit 1), rank 1 exits 1 without a message",
          r0.returncode == 1 and f"{badm}: bad magic 123" in r0.stderr and "Traceback" not in r0.stderr
          and r1.returncode == 1 and r1.stderr == "", f"rank 0: {r0.stderr[-200:]} rank 1: {r1.stderr[-200:]}")
    r0 = ranked(["--train-data", os.path.join(good, "g_train_*.bin"), "--log-file", log] + flags, 0, 2)
    check("an existing log on 2 ranks: refused before any GPU work, the log left as it was",
          r0.returncode == 1 and f"{log} exists" in r0.stderr and open(log).read() == "an earlier run\n", r0.stderr[-300:])

    # --- synthetic shards
    out = os.path.join(tmp, "synth")
    r = subprocess.run(SYNTH + [out, "--train-tokens", "300000", "--val-tokens", "100000", "--shard-tokens", "200000", "--seed", "3"],
                       capture_output=True, text=True, timeout=60)
    check("synthetic shards written", r.returncode == 0 and sorted(os.listdir(out)) == [
        "manifest.tsv", "synth_train_000001.bin", "synth_train_000002.bin", "synth_val_000000.bin"], r.stderr + str(os.listdir(tmp)))
    toks = np.concatenate([peer.read_shard(os.path.join(out, f), 50257) for f in ("synth_train_000001.bin", "synth_train_000002.bin")])
    starts = np.flatnonzero(toks == peer.BOS)
    lengths = np.diff(starts)
    # exponential lengths of mean 1000 (at least 2): the mean of ~300 of them is within 4 standard errors
    check("documents of mean length about 1000", len(lengths) > 150 and abs(lengths.mean() - 1000) < 4 * 1000 / np.sqrt(len(lengths)),
          f"{len(lengths)} documents, mean {lengths.mean():.0f}")
    check("each shard starts with a document", toks[0] == peer.BOS)
    if os.path.exists(train_gpt):
        r = subprocess.run([train_gpt, "--check-data", "--train-data", os.path.join(out, "synth_train_*.bin"),
                            "--val-data", os.path.join(out, "synth_val_*.bin")], capture_output=True, text=True, timeout=60)
        check("train_gpt --check-data accepts them (manifest and SHA-256)", r.returncode == 0 and "all shards good" in r.stdout,
              r.stdout + r.stderr)
    r = subprocess.run(SYNTH + [out], capture_output=True, text=True, timeout=60)
    check("synthetic shards: a non-empty folder is refused", r.returncode == 1 and "exists" in r.stderr and "Traceback" not in r.stderr,
          r.stderr)
    check("synthetic shards: the refused folder is untouched", len(os.listdir(out)) == 4)
    r = subprocess.run(SYNTH + [os.path.join(tmp, "x"), "--mean-doc", "0"], capture_output=True, text=True, timeout=60)
    check("synthetic shards: --mean-doc 0 refused", r.returncode == 2 and "--mean-doc" in r.stderr)

    # --- peer_compare.sh: each variable in range, GPUS a list of counts dividing the batch of 8
    compare = ["bash", os.path.join(root, "peer", "peer_compare.sh")]
    never = os.path.join(tmp, "compare_logs")
    for var, value, needle in (("GPUS", "3", "GPUS: 3 does not divide the batch of 8"), ("GPUS", "0", "GPUS must be from 1 to 8"),
                               ("GPUS", "1,,2", "GPUS must be a whole number"), ("GPUS", "16", "GPUS must be from 1 to 8"),
                               ("GPUS", "1,1", "GPUS: 1 is listed twice"), ("GPUS", "1,2,", "GPUS must be a whole number"),
                               ("GPUS", "two", "GPUS must list GPU counts"), ("GPUS", "0 2", "no spaces"), ("GPUS", "2\n4", "no spaces"), ("STEPS", "11", "STEPS must be from 12"),
                               ("STEPS", "100001", "STEPS must be from 12 to 100000"),
                               ("RECORD_MS", "0", "RECORD_MS must be from 1 to 1000000"),
                               ("RECORD_MS", "1.5", "RECORD_MS must be a whole number")):
        env = dict(os.environ, LOG_DIR=never)
        env[var] = value
        r = subprocess.run(compare, capture_output=True, text=True, timeout=60, env=env)
        check(f"peer_compare.sh {var}={value} refused (exit 2), naming it, nothing written",
              r.returncode == 2 and needle in r.stderr and not os.path.exists(never) and len(r.stderr.strip().splitlines()) == 1,
              f"rc {r.returncode}: {r.stderr[-300:]}")

finish("torch-peer")
