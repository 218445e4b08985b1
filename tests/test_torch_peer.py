"""The parts of the PyTorch peer (peer/torch_peer.py) that need no GPU, and the synthetic shards
of scripts/synthetic_shards.py:
  - the block classification its FlexAttention mask is built from, against the dense mask of
    docs/masks.md on random documents (exact: both are boolean);
  - the data order (data/dataloader.h's rule) and its schedules (train_gpt's, hand-computed);
  - bad input refused with a one-line message naming the file or flag, before PyTorch is needed;
  - synthetic shards: the format, the manifest (train_gpt --check-data reads them), the document
    lengths, a refused non-empty folder.

    python3 tests/test_torch_peer.py [TRAIN_GPT]
"""
import os
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
    refused("a shard with the wrong magic", ["--train-data", badm] + flags, f"{badm}: not a token shard")
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

finish("torch-peer")
