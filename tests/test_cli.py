"""Command-line behaviour without a GPU: train_gpt --help and flag errors, prepare end to end on
small texts (token stream checked against the independent reference tokenizer), and
train_gpt --check-data on good and bad shards.

    python3 tests/test_cli.py BUILD_DIR VOCAB_DIR
"""
import os
import struct
import subprocess
import sys
import shutil
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require; require("numpy", "regex", suite="cli")  # noqa: E402,E702
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from gpt2_reference import Reference  # noqa: E402
from harness import check, finish  # noqa: E402

build, vocab = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "train_gpt")
PREPARE = os.path.join(build, "prepare")


def run(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def read_shard(path):
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    return header, np.frombuffer(raw[1024:], dtype="<u2")


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


# small good shards for the runs that must get past the data checks (tiny preset: 1024-token sequences)
SHARDS = tempfile.mkdtemp(prefix="cli_shards_")
_rng = np.random.default_rng(3)
for name in ("toy_val_000000.bin", "toy_train_000001.bin"):
    toks = _rng.integers(0, 50256, size=20000)
    toks[::700] = 50256
    write_shard(os.path.join(SHARDS, name), toks)
DATA = ["--train-data", os.path.join(SHARDS, "toy_train_*.bin"), "--val-data", os.path.join(SHARDS, "toy_val_*.bin")]

rc, out, err = run(TRAIN, "--help")
check("train_gpt --help works without a GPU", rc == 0 and "--check-data" in out and "--train-data" in out, err)
rc, out, err = run(TRAIN, "--preset", "nope")
check("unknown preset: exit 2 naming it", rc == 2 and "nope" in (out + err), out + err)
rc, out, err = run(TRAIN, "--heads", "3")
check("impossible head size: exit 2 naming the flag", rc == 2 and "--heads" in (out + err), out + err)
rc, out, err = run(TRAIN, "--layers", "3")
check("odd layer count: exit 2 naming the flag", rc == 2 and "--layers" in (out + err), out + err)
if shutil.which("nvidia-smi") is None:  # CI and this machine: no GPU
    rc, out, err = run(TRAIN, "--preset", "tiny", "--steps", "1", *DATA)
    check("training without a GPU: a clear error", rc == 1 and "no CUDA GPU" in err, out + err)
rc, out, err = run(TRAIN, "--resume", "/nonexistent/run.ckpt")
check("resume from a missing checkpoint: exit 1 naming it", rc == 1 and "/nonexistent/run.ckpt" in err, out + err)
with tempfile.NamedTemporaryFile("wb", suffix=".ckpt", delete=False) as f:
    f.write(b"not a checkpoint")
rc, out, err = run(TRAIN, "--resume", f.name)
check("resume from a file that is not a checkpoint: refused", rc == 1 and "not a train_gpt checkpoint" in err, out + err)
os.unlink(f.name)
rc, out, err = run(TRAIN, "--checkpoint-every", "5")
check("--checkpoint-every without a directory: exit 2", rc == 2 and "--checkpoint-dir" in (out + err), out + err)
rc, out, err = run(TRAIN, "--no-such-flag")
check("unknown flag: exit 2 naming it", rc == 2 and "--no-such-flag" in (out + err), out + err)
rc, out, err = run(TRAIN, "--vocab-size", "0", "--check-data")
check("out-of-range value: exit 2 naming the flag", rc == 2 and "--vocab-size" in (out + err), out + err)
rc, out, err = run(TRAIN, "--grad-sync", "sometimes")
check("unknown --grad-sync: exit 2 naming the flag", rc == 2 and "--grad-sync" in (out + err), out + err)
rc, out, err = run(TRAIN, "--fault", "1:2:explode")
check("malformed --fault: exit 2 naming the flag", rc == 2 and "--fault" in (out + err), out + err)
rc, out, err = run(TRAIN, "--timeout", "0")
check("--timeout 0: exit 2 naming the flag", rc == 2 and "--timeout" in (out + err), out + err)
# a mask that lets position t see the token at t + 1 it is scored on: refused before any GPU work
# (exit 2, naming the flag that causes it and the one that allows it), for every window form and
# document setting; with --allow-target-leak, or with a prefix (whose targets inside the prefix
# are dropped), the run gets past that check to the next refusal: a log in a missing folder
MISSING_LOG = ["--log-file", os.path.join(SHARDS, "no_such_folder", "run.txt")]
for mask in ("uni", "bi"):
    for gran in ("block", "token"):
        for docs in ("0", "1"):
            rc, out, err = run(TRAIN, "--preset", "tiny", *DATA, "--causal", "0", "--window-mask", mask, "--window-granularity", gran,
                               "--doc-mask", docs)
            check(f"--causal 0 --window-mask {mask} --window-granularity {gran} --doc-mask {docs}: refused (exit 2), naming "
                  "--causal 0 and --allow-target-leak", rc == 2 and "--causal 0" in err and "--allow-target-leak" in err and
                  "Traceback" not in err and out == "", out + err)
for name, flags in (("--causal 0 --allow-target-leak", ["--causal", "0", "--allow-target-leak"]),
                    ("--prefix-tokens 64", ["--prefix-tokens", "64"]), ("--prefix-tokens 64 --prefix-attention 0",
                                                                          ["--prefix-tokens", "64", "--prefix-attention", "0"]),
                    ("causal", [])):
    rc, out, err = run(TRAIN, "--preset", "tiny", *DATA, *flags, *MISSING_LOG)
    check(f"{name}: not refused for its mask (the next check refuses the log's missing folder)",
          rc == 2 and "--log-file" in err and "allow-target-leak" not in err, out + err)
# under mpirun (OpenMPI, installed by the set-up): the global batch must split over the ranks,
# checked on every rank before any GPU is needed
if shutil.which("mpirun"):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    r = subprocess.run(["mpirun", "-np", "3", TRAIN, "--preset", "tiny"], capture_output=True, text=True, timeout=120, env=env)
    msg = r.stdout + r.stderr
    check("mpirun -np 3 with 8 sequences a step: refused, naming the flag and the GPU counts that work",
          r.returncode == 2 and "--seqs-per-step" in msg and "1, 2, 4, 8" in msg, msg)
    r = subprocess.run(["mpirun", "-np", "2", TRAIN, "--preset", "tiny", "--seqs-per-step", "6", "--help"], capture_output=True,
                       text=True, timeout=120, env=env)
    check("mpirun -np 2 ./train_gpt --help: exit 0, help printed once", r.returncode == 0 and r.stdout.count("--grad-sync") == 1,
          r.stdout + r.stderr)
    if shutil.which("nvidia-smi") is None:
        r = subprocess.run(["mpirun", "-np", "2", TRAIN, "--preset", "tiny", *DATA], capture_output=True, text=True, timeout=120, env=env)
        msg = r.stdout + r.stderr
        check("mpirun -np 2 without a GPU: the job ends, each error names its rank",
              r.returncode != 0 and "of 2: error: no CUDA GPU" in msg, msg)
else:
    print("note: mpirun not found; the multi-process checks were skipped")

docs = [b"Hello world. This is the first document.\n",
        "Second document: caf\u00e9, na\u00efve, 123 numbers, emoji \U0001F600!\n".encode(),
        b"A third, much longer document. " * 40,
        b"x"]
ref = Reference(vocab)
with tempfile.TemporaryDirectory() as d:
    paths = []
    for i, doc in enumerate(docs):
        p = os.path.join(d, f"doc{i}.txt")
        open(p, "wb").write(doc)
        paths.append(p)
    out_dir = os.path.join(d, "shards")
    shard_tokens = 100
    rc, out, err = run(PREPARE, "--text", *paths, "--out-dir", out_dir, "--name", "toy", "--vocab-dir", vocab,
                       "--shard-tokens", str(shard_tokens), "--no-shuffle", "--threads", "2")
    check("prepare runs", rc == 0, err)
    check("prepare reports progress and a summary", "4 documents" in err and "MB/s" in err, err)
    names = sorted((n for n in os.listdir(out_dir) if n.endswith(".bin")), key=lambda n: ("_val_" not in n, n))
    check("prepare writes a manifest of its shards", sorted(os.listdir(out_dir)) == sorted(names + ["manifest.tsv"]), str(os.listdir(out_dir)))
    check("first shard is val, then train", names[0] == "toy_val_000000.bin" and names[1] == "toy_train_000001.bin", str(names))
    stream, sizes = [], []
    for n in names:
        header, toks = read_shard(os.path.join(out_dir, n))
        check(f"{n} header", header[0] == 20240520 and header[1] == 1 and header[2] == len(toks) and not header[3:].any())
        sizes.append(len(toks))
        stream += toks.tolist()
    expect = []
    for doc in docs:
        expect += [50256] + ref.encode(doc)
    check("token stream = BOS + reference ids per document", stream == expect, f"{len(stream)} vs {len(expect)}")
    check("no shard exceeds --shard-tokens", max(sizes) <= shard_tokens, str(sizes))
    # documents shorter than a shard are never split: every shard starts with BOS
    starts_ok = all(read_shard(os.path.join(out_dir, n))[1][0] == 50256 for n in names[:2])
    check("short documents start their shard", starts_ok)

    # shuffling keeps the multiset of documents and is reproducible
    outs = []
    for k in range(2):
        od = os.path.join(d, f"shuf{k}")
        rc, _, err = run(PREPARE, "--text", *paths, "--out-dir", od, "--vocab-dir", vocab, "--shard-tokens", "100000", "--seed", "7")
        outs.append(read_shard(os.path.join(od, "gcide_val_000000.bin"))[1].tolist())
    check("shuffle is reproducible", rc == 0 and outs[0] == outs[1], err)
    check("shuffle keeps every token", sorted(outs[0]) == sorted(expect))
    rc, out, err = run(PREPARE, "--text", os.path.join(d, "missing.txt"), "--out-dir", os.path.join(d, "new1"), "--vocab-dir", vocab)
    check("missing input named", rc == 1 and "missing.txt" in err and not os.path.exists(os.path.join(d, "new1")), err)
    rc, out, err = run(PREPARE, "--text", paths[0], "--out-dir", os.path.join(d, "new2"), "--vocab-dir", os.path.join(d, "novocab"))
    check("missing vocabulary: clear error", rc == 1 and "encoder.json" in err, err)
    before = sorted(os.listdir(out_dir))
    rc, out, err = run(PREPARE, "--text", paths[0], "--out-dir", out_dir, "--vocab-dir", vocab, "--name", "toy")
    check("prepare into a used folder: refused (exit 2) naming --out-dir, nothing changed",
          rc == 2 and "--out-dir" in err and "not empty" in err and sorted(os.listdir(out_dir)) == before, err)
    leftovers = [n for n in os.listdir(d) if ".partial" in n]
    check("no staging folder is left behind by the failed runs", not leftovers, str(leftovers))

    # --check-data
    pat_train, pat_val = os.path.join(out_dir, "toy_train_*.bin"), os.path.join(out_dir, "toy_val_*.bin")
    rc, out, err = run(TRAIN, "--check-data", "--train-data", pat_train, "--val-data", pat_val)
    check("check-data on good shards: exit 0", rc == 0 and "all shards good" in out, out + err)
    rc, out, err = run(TRAIN, "--check-data", "--train-data", os.path.join(d, "nope_*.bin"), "--val-data", pat_val)
    check("check-data: pattern matching nothing", rc == 1 and "nope_*.bin" in err and "--train-data" in err, err)
    bad = os.path.join(out_dir, "toy_train_000002.bin")
    raw = bytearray(open(bad, "rb").read())
    for name, mutate, expect_msg in [
        ("truncated", lambda b: b[:-3], "truncated"),
        ("magic", lambda b: struct.pack("<i", 7) + b[4:], "bad magic 7"),
        ("id", lambda b: b[:1030] + struct.pack("<H", 60000) + b[1032:], "token id 60000 at position 3"),
    ]:
        open(bad, "wb").write(mutate(bytes(raw)))
        rc, out, err = run(TRAIN, "--check-data", "--train-data", pat_train, "--val-data", pat_val)
        check(f"check-data finds {name}", rc == 1 and "toy_train_000002.bin" in err and expect_msg in err, err)
    open(bad, "wb").write(bytes(raw))

    # a shard copied in beside the run's: the manifest refuses the mix, in --check-data and in training
    shutil.copy(os.path.join(out_dir, "toy_train_000001.bin"), os.path.join(out_dir, "toy_train_000009.bin"))
    rc, out, err = run(TRAIN, "--check-data", "--train-data", pat_train, "--val-data", pat_val)
    check("check-data: a shard not in the manifest is named", rc == 1 and "toy_train_000009.bin: not listed" in err, err)
    rc, out, err = run(TRAIN, "--steps", "1", "--train-data", pat_train, "--val-data", pat_val, "--seq-len", "16", "--val-tokens", "16")
    check("training on a mixed folder: refused before any GPU is needed", rc == 1 and "toy_train_000009.bin: not listed" in err, err)
    os.remove(os.path.join(out_dir, "toy_train_000009.bin"))
    os.remove(os.path.join(out_dir, "toy_train_000003.bin"))
    rc, out, err = run(TRAIN, "--check-data", "--train-data", pat_train, "--val-data", pat_val)
    check("check-data: a shard of the manifest that is missing is named", rc == 1 and "toy_train_000003.bin: listed" in err, err)

shutil.rmtree(SHARDS, ignore_errors=True)
# bench_attention --geometry: the sm90 kernels' tile walk without a GPU, on a mask worked by hand.
# Dense causal at T = 1024: the forward's 8 query tiles of 128 walk 1, 2, ..., 8 key tiles of 128
# (36, the 8 diagonal ones partial); the backward's 8 key blocks of 128 walk 16 - 2j query tiles
# of 64 (72, two partial each: 16); kept pairs 1024 * 1025 / 2 = 524800, of 36 * 128 * 128 =
# 72 * 128 * 64 = 589824 computed: 0.8898.
rc, out, err = run(os.path.join(build, "bench", "bench_attention"), "--geometry", "--T", "1024", "--causal", "1")
row = next((l.split() for l in out.splitlines() if l.startswith("causal ")), [])
check("bench_attention --geometry: dense causal at T = 1024 as worked by hand",
      rc == 0 and row[1:] == ["524800", "0.50049", "36", "8", "0.8898", "72", "16", "0.8898"], out + err)
# At head dim 64 with a window the forward's blocks own 64 queries over key tiles of 128: causal +
# 128 uni at T = 1024, query tile i (rows 64i..64i+63, keeping keys from 64i - 127) walks key tile
# 0 alone for i = 0, 1, and key tiles i/2 - 1 and i/2 (rounded down) for i >= 2, all partial (no
# tile lies inside every row's 128 keys): 1 + 1 + 14 * 2 = 30 tiles, 30 partial; kept pairs 8256
# + 896 * 128 = 122944 of 30 * 64 * 128 computed: 0.5003. At head dim 128 the same mask takes
# 128 x 128 tiles.
# The backward's blocks own 64 keys there too: key block b (keys 64b..64b+63, kept by queries up
# to 64b+190) walks query tiles b (diagonal, partial), b+1 (q - k from 1 to 127: full) and b+2
# (q - k from 65 to 191: partial) for b <= 13, block 14 tiles 14 and 15 (full), block 15 tile
# 15: again 45 tiles, 30 partial, 0.6670.
rc, out, err = run(os.path.join(build, "bench", "bench_attention"), "--geometry", "--T", "1024", "--causal", "1", "--window", "128",
                   "--head-dim", "64")
row = next((l.split() for l in out.splitlines() if l.startswith("causal ")), [])
check("bench_attention --geometry: head dim 64 with a window walks 64 x 128 forward tiles and 64-key backward blocks, as worked by hand",
      rc == 0 and row[4:12] == ["122944", "0.11725", "30", "30", "0.5003", "45", "30", "0.6670"], out + err)
rc, out, err = run(os.path.join(build, "bench", "bench_attention"), "--geometry", "--T", "1024", "--causal", "1", "--window", "128")
row = next((l.split() for l in out.splitlines() if l.startswith("causal ")), [])
check("bench_attention --geometry: head dim 128 keeps 128 x 128 forward tiles (1 + 7 * 2 = 15, all partial)",
      rc == 0 and row[6:8] == ["15", "15"], out + err)
# At head dim 64 without a window or documents the forward's blocks own 192 queries over key tiles
# of 128: dense causal at T = 1024, query tile i (rows 192i..192i+191) walks key tiles 0 to
# (192i + 191) / 128, the last two partial: 2, 3, 5, 6, 8 tiles for i = 0..4, and tile 5 (rows
# 960..1151, past T) walks 8, all of them partial as a block running past T takes them: 32
# tiles, 18 partial; 524800 kept pairs of 32 * 192 * 128 computed: 0.6673.
# The backward's blocks own 128 keys there and walk query tiles of 128: key block b (keys
# 128b..128b+127) walks tiles b to 7, the first partial (a query of tile b + 1 or later follows
# every key of the block): 8, 7, ..., 1 tiles for b = 0..7: 36 tiles, 8 partial; 524800 of
# 36 * 128 * 128 computed: 0.8898.
rc, out, err = run(os.path.join(build, "bench", "bench_attention"), "--geometry", "--T", "1024", "--causal", "1", "--head-dim", "64")
row = next((l.split() for l in out.splitlines() if l.startswith("causal ")), [])
check("bench_attention --geometry: head dim 64 dense causal walks 192 x 128 forward and 128 x 128 backward tiles, as worked by hand",
      rc == 0 and row[1:9] == ["524800", "0.50049", "32", "18", "0.6673", "36", "8", "0.8898"], out + err)
rc, out, err = run(os.path.join(build, "bench", "bench_attention"), "--geometry", "--T", "4096", "--window", "8",
                   "--window-granularity", "block", "--window-mask", "bi", "--docs", "1")
rc2, out2, _ = run(os.path.join(build, "bench", "bench_attention"), "--geometry", "--T", "4096", "--window", "8",
                   "--window-granularity", "block", "--window-mask", "uni", "--docs", "1")
check("bench_attention --geometry: uni and bi windows give the same tiles under causal",
      rc == 0 and rc2 == 0 and out.splitlines()[-1].split()[-8:] == out2.splitlines()[-1].split()[-8:], out + out2)

finish("cli")
