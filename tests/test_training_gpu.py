"""Whole training runs on the GPU (part of make test-gpu): reproducibility, resume, masks, and
with two or more GPUs the data-parallel trainer and its fault handling.

    python3 tests/test_training_gpu.py TRAIN_PATTERN VAL_PATTERN [TRAINER]

All runs use the tiny preset (2 layers, width 128, 1024-token sequences, 8 a step) on the
given shards. Losses are compared from the JSON-lines logs, where they are written with 17
significant digits, so "equal" below means equal to the bit.
  1 GPU: the same seed twice gives the same losses; another seed does not. A run resumed from
  its step-20 checkpoint gives the uninterrupted run's losses for steps 21-30 and an identical
  final checkpoint file; a checkpoint of another configuration is refused. With causal on, the
  uni and bi windows give the same losses; with causal off they differ. Prefix-LM (a prefix
  longer than a token window): reproducible to the bit, uni and bi differ, the causal baseline
  on the same targets differs from both prefix-LM and plain causal, and its checkpoint is refused
  by a run without the prefix. --grad-sync embeddings gives the default run's losses to the bit
  (with 2 layers and with 4, where a value embedding is updated during the backward), and so does
  --balance-ranks (one rank has nothing to balance).
  2 GPUs (mpirun, when two are visible): --check-replicas passes (weights bit-identical across
  ranks after every step); a 2-GPU run resumed from its step-10 checkpoint (written by rank 0,
  read by every rank) gives the same losses and final checkpoint as the uninterrupted run; the loss of step 1 equals the 1-GPU run's to 1e-6 relative (same
  weights and sequences; only the order of the mean's sum differs) and every later step is
  within 1% relative: the gradient sums are rounded in another order (fp32), after which bf16
  weights can differ by an ulp (2^-8 relative) and the runs drift apart slowly, as any two
  orders do. --balance-ranks hands most steps' sequences out otherwise, brings the slowest rank nearer
  the mean, keeps the replicas identical, and drifts from the default as 1 and 2 GPUs do. --grad-sync
  overlap and embeddings give the default run's losses to the bit (a two-rank
  sum is one addition, whatever the grouping); with --grad-exchange bf16 the three schedules agree
  to the bit and differ from fp32's by little. The weights' last all-gathers left to the next
  step's forward, which waits for each layer's weights before that layer (--gather-wait layer,
  the default, on the copy engines), give the losses of a run that waits for every all-gather
  inside its step on NCCL's kernels to the bit (an all-gather adds nothing), as do the other two
  combinations; the summary counts the steps that left their all-gathers to the next forward. Two ranks started from a host file with NCCL on its
  network transport (P2P and shared memory off, the loopback interface), as on two hosts, give the
  default run's losses to the bit. A rank that is killed, crashes or hangs ends the whole job
  within a bounded time with a message naming the rank.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, shard_args  # noqa: E402

TRAIN_PAT, VAL_PAT, TRAINER = shard_args("test_training_gpu", "training-gpu")
TMP = tempfile.mkdtemp(prefix="train_test_")
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
BASE = ["--preset", "tiny", "--train-data", TRAIN_PAT, "--val-data", VAL_PAT]


def gpu_count():
    """The GPUs this process may use: nvidia-smi's, or fewer where CUDA_VISIBLE_DEVICES names fewer
    (nvidia-smi lists every GPU of the machine whatever that variable says)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
        n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return n
        named = 0  # as CUDA reads it: entries (an index or a GPU-/MIG- UUID) up to the first that is not one
        for d in visible.split(","):
            if not re.fullmatch(r"[0-9]+|GPU-[0-9A-Fa-f-]+|MIG-\S+", d.strip()):
                break
            named += 1
        return min(n, named)
    except OSError:
        return 0


def train(name, *flags, gpus=1, timeout=600):
    """Runs the trainer; returns (exit code, output, {step: (train_loss, val_loss)} from the JSONL log)."""
    log = os.path.join(TMP, name + ".txt")
    cmd = ([] if gpus == 1 else ["mpirun", "-np", str(gpus)]) + [TRAINER] + BASE + list(flags) + ["--log-file", log]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=MPI_ENV)
    out = r.stdout + r.stderr
    losses = {}
    jl = os.path.join(TMP, name + ".jsonl")
    if os.path.exists(jl):
        for line in open(jl):
            e = json.loads(line)
            if e.get("event") in ("step", "val"):
                tl, vl = losses.get(e["step"], (None, None))
                losses[e["step"]] = (e.get("train_loss", tl), e.get("val_loss", vl))
    print(f"  {name}: exit {r.returncode} in {time.time() - t0:.1f} s, {len(losses)} steps logged", flush=True)
    return r.returncode, out, losses


def train_losses(losses, steps):
    return [losses.get(s, (None, None))[0] for s in steps]


# ---------------------------------------------------------------------------- one GPU
rc, out_a, a = train("a", "--steps", "30", "--val-every", "10", "--seed", "7", "--checkpoint-dir", os.path.join(TMP, "ck_a"),
                     "--checkpoint-every", "10", "--profile", "5")
check("30-step run: exit 0, every step logged", rc == 0 and all(s in a for s in range(31)), out_a[-2000:])
check("the run prints MFU, tokens/s and peak memory", "MFU" in out_a and "tokens/s" in out_a and "peak GPU memory" in out_a, out_a[-1500:])
check("--profile prints the per-category table", "profile: GPU time per step" in out_a and "attention backward" in out_a, out_a[-1500:])


def profile_sums(out):
    """(per-category ms, per-category sum of its operations' ms, operations per category) from
    --profile's two tables."""
    cats, ops, n, part = {}, {}, {}, None
    for line in out.splitlines():
        if line.startswith("profile: GPU time per step by category"):
            part = "cat"
        elif line.startswith("profile: GPU time per step by operation"):
            part = "op"
        elif part and line.startswith("  "):
            m = re.match(r"  (.{34}) (?:(.{34}) )?\s*([0-9.]+) ms", line)
            if not m:
                continue
            name, ms = m.group(1).strip(), float(m.group(3))
            if part == "cat" and name != "total":
                cats[name] = ms
            elif part == "op":
                ops[name] = ops.get(name, 0.0) + ms
                n[name] = n.get(name, 0) + 1
        else:
            part = None
    return cats, ops, n


# each figure is printed rounded to 0.005 ms: a category and the sum of its k operations differ by at
# most 0.005 (k + 1)
cats, ops, n_ops = profile_sums(out_a)
check("--profile's operations add up to their categories (to the table's rounding)",
      len(cats) >= 8 and set(ops) <= set(cats) and
      all(abs(ops.get(c, 0.0) - ms) <= 0.005 * (n_ops.get(c, 0) + 1) + 1e-9 for c, ms in cats.items()) and
      "ReLU^2 backward" in out_a and "Wfc dW (C x 4C)" in out_a, out_a[-3000:])
check("checkpoints at 10, 20 and at the end", all(os.path.exists(os.path.join(TMP, "ck_a", f"ckpt_{s:06d}.bin")) for s in (10, 20, 30)))
rc, _, c = train("c", "--steps", "30", "--val-every", "10", "--seed", "7")
check("same seed, same flags: the same losses to the bit", rc == 0 and train_losses(c, range(1, 31)) == train_losses(a, range(1, 31)))
# the head's Adam step on the optimiser's stream while the backward runs: the same arithmetic
rc, oute1, e1 = train("emb1", "--steps", "30", "--val-every", "10", "--seed", "7", "--grad-sync", "embeddings")
check("--grad-sync embeddings gives the default (end) run's losses to the bit", rc == 0 and e1 == c, oute1[-1500:])
rc, outb1, b1 = train("bal1", "--steps", "30", "--val-every", "10", "--seed", "7", "--balance-ranks")
check("--balance-ranks on one GPU changes nothing: the default run's losses to the bit", rc == 0 and b1 == c, outb1[-1500:])
# with 4 layers value_embed.1 is final after layer 1's backward, so its update runs beside layer 0's
rc, outl4, l4_end = train("l4_end", "--layers", "4", "--steps", "20", "--val-every", "10", "--seed", "5")
rc2, outl4e, l4_emb = train("l4_emb", "--layers", "4", "--steps", "20", "--val-every", "10", "--seed", "5", "--grad-sync", "embeddings")
check("4 layers: --grad-sync embeddings (a value embedding updated during the backward) gives end's losses to the bit",
      rc == 0 and rc2 == 0 and len(l4_end) == 21 and l4_emb == l4_end, (outl4 + outl4e)[-1500:])
rc, _, d = train("d", "--steps", "5", "--val-every", "10", "--seed", "8")
check("another seed: other losses", rc == 0 and train_losses(d, range(1, 6)) != train_losses(a, range(1, 6)))

rc, out_b, b = train("b", "--steps", "30", "--val-every", "10", "--seed", "7", "--checkpoint-dir", os.path.join(TMP, "ck_b"),
                     "--resume", os.path.join(TMP, "ck_a", "ckpt_000020.bin"))
check("resume from step 20: exit 0, starts at 20", rc == 0 and min(b) == 20 and "resumed from" in out_b, out_b[-1500:])
same = [s for s in range(21, 31) if b.get(s) == a.get(s)] + ([20] if b.get(20, (0, 0))[1] == a.get(20, (1, 1))[1] else [])
check("resumed losses (val at 20 and 30, train 21-30) equal the uninterrupted run's to the bit", len(same) == 11,
      f"equal at {same}; a={[a.get(s) for s in range(20, 31)]} b={[b.get(s) for s in range(20, 31)]}")
fa, fb = (open(os.path.join(TMP, k, "ckpt_000030.bin"), "rb").read() for k in ("ck_a", "ck_b"))
check("the resumed run's final checkpoint is byte-identical to the uninterrupted run's", fa == fb)
rc, out, _ = train("wrong", "--steps", "30", "--seed", "7", "--width", "256", "--heads", "2",
                   "--resume", os.path.join(TMP, "ck_a", "ckpt_000020.bin"))
check("a checkpoint of another configuration is refused, naming it", rc != 0 and "ckpt_000020.bin" in out and "width" in out, out[-800:])

rc1, _, uni = train("uni", "--steps", "10", "--val-every", "5", "--window-blocks", "2", "--window-mask", "uni")
rc2, _, bi = train("bi", "--steps", "10", "--val-every", "5", "--window-blocks", "2", "--window-mask", "bi")
check("causal on: uni and bi windows give the same losses to the bit", rc1 == 0 and rc2 == 0 and uni == bi and len(uni) == 11)
rc1, _, uni0 = train("uni_nc", "--steps", "5", "--window-blocks", "2", "--window-mask", "uni", "--causal", "0", "--allow-target-leak")
rc2, _, bi0 = train("bi_nc", "--steps", "5", "--window-blocks", "2", "--window-mask", "bi", "--causal", "0", "--allow-target-leak")
check("causal off: uni and bi windows differ", rc1 == 0 and rc2 == 0 and train_losses(uni0, range(1, 6)) != train_losses(bi0, range(1, 6)))


def logged_leak(name):
    """What a run's logs say of its mask: leaks_targets in the configuration, and the text log's
    mask lines that end 'leaks targets: yes' or 'no'."""
    if not os.path.exists(os.path.join(TMP, name + ".jsonl")):
        return None, []
    with open(os.path.join(TMP, name + ".jsonl")) as f:
        cfg = json.loads(f.readline())
    with open(os.path.join(TMP, name + ".txt")) as f:
        said = [l.rsplit("leaks targets: ", 1)[1].strip() for l in f if "leaks targets: " in l]
    return cfg.get("leaks_targets"), said


check("the logs state whether the mask leaks targets: causal off yes, causal on no (configuration and text)",
      logged_leak("uni_nc") == ("yes", ["yes"]) and logged_leak("bi") == ("no", ["no"]), f"{logged_leak('uni_nc')} {logged_leak('bi')}")

# prefix-LM: the prefix changes the learning; its causal baseline (the same targets) differs from
# both; with a prefix longer than the window, uni and bi windows are different masks. That is
# shown without the document mask (the test data's documents are shorter than the window, so
# inside them the two agree) and with 4 layers: the rows where they differ are prefix rows q <
# P - W, which a 2-layer model's counted predictions (positions >= P - 1, seeing keys >= P - W)
# never reach. A prefix run is reproducible to the bit, and its checkpoint resumes only a prefix
# run.
PFX = ["--steps", "10", "--val-every", "5", "--window-blocks", "2", "--window-granularity", "token", "--prefix-tokens", "300"]
rc1, out_p, pu = train("prefix_uni", *PFX, "--window-mask", "uni", "--checkpoint-dir", os.path.join(TMP, "ck_p"))
rc2, _, pu2 = train("prefix_uni_again", *PFX, "--window-mask", "uni")
rc3, _, pb = train("prefix_bi_nodoc", *PFX, "--window-mask", "bi", "--doc-mask", "0", "--layers", "4")
rc6, _, pu0 = train("prefix_uni_nodoc", *PFX, "--window-mask", "uni", "--doc-mask", "0", "--layers", "4")
rc4, _, pc = train("prefix_baseline", *PFX, "--window-mask", "uni", "--prefix-attention", "0")
rc5, _, cu = train("causal_token", *PFX[:-2], "--window-mask", "uni")
ok = rc1 == rc2 == rc3 == rc4 == rc5 == rc6 == 0
check("prefix-LM runs: exit 0, every step logged", ok and all(s in pu for s in range(11)), out_p[-1500:])
check("prefix-LM: the same run twice gives the same losses to the bit", ok and pu == pu2)
check("prefix-LM: uni and bi windows differ (the prefix reaches past the window)", ok and pu0 != pb)
check("prefix-LM, its causal baseline on the same targets and plain causal: three different runs",
      ok and len({tuple(train_losses(x, range(1, 11))) for x in (pu, pc, cu)}) == 3)
rc, out, _ = train("prefix_resume_wrong", *PFX[:-2], "--window-mask", "uni", "--resume", os.path.join(TMP, "ck_p", "ckpt_000010.bin"))
check("a prefix-LM checkpoint is refused by a run without the prefix, naming it", rc != 0 and "prefix_tokens" in out, out[-800:])

# ---------------------------------------------------------------------------- two GPUs
if gpu_count() >= 2 and shutil.which("mpirun"):
    steps = range(1, 21)
    rc, out1, one = train("g1", "--steps", "20", "--val-every", "10", "--seed", "11")
    rc2, out2, two = train("g2", "--steps", "20", "--val-every", "10", "--seed", "11", "--check-replicas",
                           "--checkpoint-dir", os.path.join(TMP, "ck_g2"), "--checkpoint-every", "10", gpus=2)
    check("2 GPUs: exit 0, replicas identical after every step", rc2 == 0 and "replicas identical on all 2 rank(s)" in out2, out2[-2500:])
    l1, l2 = train_losses(one, steps), train_losses(two, steps)
    if rc == 0 and rc2 == 0 and None not in l1 + l2:
        rel = [abs(x - y) / abs(x) for x, y in zip(l1, l2)]
        print(f"  1 vs 2 GPUs: step-1 rel diff {rel[0]:.2e}, max over 20 steps {max(rel):.2e} (step {1 + rel.index(max(rel))})")
        check("2 GPUs: step 1 loss equals 1 GPU's to 1e-6", rel[0] <= 1e-6, f"{rel[0]:.3e}")
        check("2 GPUs: every step's loss within 1% of 1 GPU's", max(rel) <= 1e-2, f"{rel}")
        v1, v2 = one[20][1], two[20][1]
        check("2 GPUs: final validation loss within 1% of 1 GPU's", abs(v1 - v2) <= 1e-2 * abs(v1), f"{v1} vs {v2}")
    else:
        check("1 and 2 GPU runs logged every step", False, out2[-2000:])
    # every rank resumes from rank 0's checkpoint: the same losses and final checkpoint as the run
    rc, outr, res2 = train("g2_resumed", "--steps", "20", "--val-every", "10", "--seed", "11", "--check-replicas",
                           "--checkpoint-dir", os.path.join(TMP, "ck_g2r"), "--resume", os.path.join(TMP, "ck_g2", "ckpt_000010.bin"),
                           gpus=2)
    same = [k for k in range(11, 21) if res2.get(k) == two.get(k)]
    check("2 GPUs resumed from step 10: losses of steps 11-20 equal the uninterrupted run's to the bit",
          rc == 0 and len(same) == 10 and res2.get(10, (0, 0))[1] == two.get(10, (1, 1))[1], outr[-1500:])
    g2_final = [os.path.join(TMP, k, "ckpt_000020.bin") for k in ("ck_g2", "ck_g2r")]
    check("2 GPUs resumed: final checkpoint byte-identical to the uninterrupted run's",
          all(os.path.exists(f) for f in g2_final) and open(g2_final[0], "rb").read() == open(g2_final[1], "rb").read())
    rc, oute, ovl = train("g2_overlap", "--steps", "20", "--val-every", "10", "--seed", "11", "--grad-sync", "overlap", gpus=2)
    check("2 GPUs: --grad-sync overlap gives the default (end) run's losses to the bit", rc == 0 and ovl == two, oute[-1500:])
    rc, oute, emb = train("g2_embeddings", "--steps", "20", "--val-every", "10", "--seed", "11", "--grad-sync", "embeddings",
                          "--check-replicas", gpus=2)
    check("2 GPUs: --grad-sync embeddings gives the default (end) run's losses to the bit, replicas identical",
          rc == 0 and emb == two and "replicas identical on all 2 rank(s)" in oute, oute[-1500:])
    # the weights' last all-gathers left to the next forward on the copy engines (the default; a
    # step followed by validation, a checkpoint or the replica check waits for them itself), and
    # every all-gather inside its step on NCCL's kernels: the same bits as the replica-checked run
    rc, outg, gated = train("g2_gated", "--steps", "20", "--val-every", "10", "--seed", "11", gpus=2)
    rc2, outk, stepk = train("g2_step_kernels", "--steps", "20", "--val-every", "10", "--seed", "11", "--gather-wait", "step",
                             "--gather-engine", "kernels", gpus=2)
    check("2 GPUs: the next forward waiting for each layer's weights (copy engines), and every all-gather waited for inside "
          "its step (kernels), give the replica-checked run's losses to the bit", rc == 0 and rc2 == 0 and gated == two and stepk == two,
          (outg + outk)[-1500:])
    rc, outo, other = train("g2_layer_kernels", "--steps", "20", "--val-every", "10", "--seed", "11", "--gather-engine", "kernels", gpus=2)
    rc2, outo2, other2 = train("g2_step_copy", "--steps", "20", "--val-every", "10", "--seed", "11", "--gather-wait", "step", gpus=2)
    check("2 GPUs: the other two combinations (the next forward waiting on kernels' all-gathers; every copy-engine all-gather "
          "inside its step) give the same losses to the bit", rc == 0 and rc2 == 0 and other == two and other2 == two, (outo + outo2)[-1500:])
    sg, sk = ({}, {})
    for name, d in (("g2_gated", sg), ("g2_step_kernels", sk)):
        if os.path.exists(os.path.join(TMP, name + ".jsonl")):
            d.update(next((e for e in map(json.loads, open(os.path.join(TMP, name + ".jsonl"))) if e.get("event") == "summary"), {}))
    # (10 timed steps, 11-20: every one but step 20, which validation follows, leaves its gathers to the next forward)
    check("2 GPUs: the summary says where the all-gathers ran, how many timed steps left them to the next forward (9 of 10, "
          "none with --gather-wait step) and how long it waited for them, the log line too",
          sg.get("copy_engines") == 1 and sk.get("copy_engines") == 0 and sg.get("gated_steps") == 9 and sk.get("gated_steps") == 0 and
          sg.get("arrival_wait_ms", -1) >= 0 and sk.get("arrival_wait_ms", -1) == 0 and
          "the next forward's waits for the weights" in outg and "all-gathers on the copy engines" in outg and
          "all-gathers as kernels" in outk, f"{sg} {sk}")
    # the step's sequences handed out by their attention work: the same sequences a step, so step 1's
    # loss is the default run's up to the order of its sum, and the runs drift apart as 1 and 2 GPUs do
    rc, outbal, bal = train("g2_balanced", "--steps", "20", "--val-every", "10", "--seed", "11", "--balance-ranks", "--check-replicas",
                            gpus=2)
    m = re.search(r"--balance-ranks: (\d+) of (\d+) steps handed out otherwise than in order; the slowest rank's attention work "
                  r"([0-9.]+)% over the mean \(median over the steps\), ([0-9.]+)% in order", outbal)
    check("2 GPUs, --balance-ranks: exit 0, replicas identical, its report line", rc == 0 and "replicas identical on all 2 rank(s)" in outbal
          and m is not None, outbal[-1500:])
    if m:
        print(f"  --balance-ranks: {m.group(1)} of {m.group(2)} steps handed out otherwise; slowest rank {m.group(3)}% over the mean, "
              f"{m.group(4)}% in order")
        # (GCIDE's short documents make the tiny preset's sequences differ widely in attention work: scripts/rank_balance.py)
        check("2 GPUs, --balance-ranks: most steps handed out otherwise, the slowest rank nearer the mean",
              int(m.group(1)) * 2 > int(m.group(2)) and float(m.group(3)) < float(m.group(4)), m.group(0))
    lb, l2 = train_losses(bal, steps), train_losses(two, steps)
    if rc == 0 and None not in lb + l2:
        rel = [abs(x - y) / abs(y) for x, y in zip(lb, l2)]
        check("2 GPUs, --balance-ranks: step 1's loss is the default run's to 1e-6, every step within 1%", rel[0] <= 1e-6 and max(rel) <= 1e-2,
              f"{rel}")
    else:
        check("2 GPUs, --balance-ranks: every step logged", False, outbal[-1500:])
    rc, outl4, g2_l4_end = train("g2_l4_end", "--layers", "4", "--steps", "20", "--val-every", "10", "--seed", "5", gpus=2)
    rc2, outl4e, g2_l4_emb = train("g2_l4_emb", "--layers", "4", "--steps", "20", "--val-every", "10", "--seed", "5",
                                   "--grad-sync", "embeddings", "--check-replicas", gpus=2)
    check("2 GPUs, 4 layers: --grad-sync embeddings (a value embedding exchanged during the backward) gives end's losses to "
          "the bit, replicas identical", rc == 0 and rc2 == 0 and len(g2_l4_end) == 21 and g2_l4_emb == g2_l4_end and
          "replicas identical on all 2 rank(s)" in outl4e, (outl4 + outl4e)[-1500:])
    # bf16 gradients on the wire: each schedule casts them its own way (piece by piece, or into the
    # staging buffer), and a two-rank bf16 sum is still one rounded addition, so all three agree
    # to the bit; against fp32 the sums are rounded to bf16, so the losses move, but little
    bf = {}
    for sync in ("end", "embeddings", "overlap"):
        rc, outb, bf[sync] = train("g2_bf16_" + sync, "--steps", "20", "--val-every", "10", "--seed", "11", "--grad-exchange", "bf16",
                                   "--grad-sync", sync, "--check-replicas", gpus=2)
        check(f"2 GPUs, --grad-exchange bf16 --grad-sync {sync}: exit 0, replicas identical, every step logged",
              rc == 0 and "replicas identical on all 2 rank(s)" in outb and all(k in bf[sync] for k in steps), outb[-1500:])
    check("2 GPUs, bf16 gradients: end, embeddings and overlap give the same losses to the bit",
          bf["end"] == bf["embeddings"] == bf["overlap"] and len(bf["end"]) > 0)
    lb, l2 = train_losses(bf["end"], steps), train_losses(two, steps)
    if None not in lb + l2:
        rel = max(abs(x - y) / abs(y) for x, y in zip(lb, l2))
        print(f"  bf16 against fp32 gradients: max rel loss diff over 20 steps {rel:.2e}")
        # bf16 sums carry 2^-9 relative rounding; over 20 tiny-preset steps the losses stay within 2%
        check("2 GPUs: bf16 gradients differ from fp32's, within 2% a step", 0 < rel <= 2e-2, f"{rel:.3e}")
    else:
        check("2 GPUs: the bf16 and fp32 runs logged every step", False)
    # NCCL over its network transport (no NVLink or shared memory between the ranks), the ranks
    # started from a host file as on several hosts: the same losses as the ordinary run
    hosts = os.path.join(TMP, "hosts")
    with open(hosts, "w") as f:
        f.write("localhost slots=2\n")
    net = ["--hostfile", hosts, "-x", "NCCL_P2P_DISABLE=1", "-x", "NCCL_SHM_DISABLE=1", "-x", "NCCL_SOCKET_IFNAME=lo"]
    log = os.path.join(TMP, "g2_net.txt")
    r = subprocess.run(["mpirun", "-np", "2"] + net + [TRAINER] + BASE + ["--steps", "20", "--val-every", "10", "--seed", "11",
                       "--log-file", log], capture_output=True, text=True, timeout=600, env=MPI_ENV)
    net_losses = {}
    if os.path.exists(log.replace(".txt", ".jsonl")):
        for line in open(log.replace(".txt", ".jsonl")):
            e = json.loads(line)
            if e.get("event") in ("step", "val"):
                tl, vl = net_losses.get(e["step"], (None, None))
                net_losses[e["step"]] = (e.get("train_loss", tl), e.get("val_loss", vl))
    check("2 ranks from a host file over NCCL's network transport: the ordinary 2-GPU run's losses to the bit",
          r.returncode == 0 and net_losses == two, (r.stdout + r.stderr)[-1500:])
    check("2 GPUs: the run reports the exchange, its exposed part and its bytes", "exposed" in out2 and "MB a rank a step" in out2, out2[-1500:])
    summ = {}
    if os.path.exists(os.path.join(TMP, "g2.jsonl")):
        summ = next((e for e in map(json.loads, open(os.path.join(TMP, "g2.jsonl"))) if e.get("event") == "summary"), {})
    lo, hi, r0 = summ.get("reduce_ms_least_rank", -1), summ.get("reduce_ms_most_rank", -1), summ.get("reduce_ms", -1)
    check("2 GPUs: the gradients' time over the ranks brackets rank 0's (0 < least <= rank 0 <= most), in the log line too",
          0 < lo <= r0 <= hi and " over the ranks; weights " in out2, f"{summ} {out2[-800:]}")
    # the forward and backward over the ranks: rank 0's mean between the least and most means;
    # the steps' mean spread at least the means' (a mean of maxima is at least the maximum of means)
    clo, chi, c0, apart = (summ.get(k, -1) for k in ("compute_ms_least_rank", "compute_ms_most_rank", "compute_ms", "compute_ms_apart"))
    check("2 GPUs: the forward and backward over the ranks brackets rank 0's, the steps' spread at least the means', in the log",
          0 < clo <= c0 <= chi and apart >= (chi - clo) - 1e-9 and "forward and backward" in out2 and "apart a step" in out2,
          f"{summ} {out2[-800:]}")

    # faults: every case must end the job, non-zero, naming the rank, well within the limit
    for kind, flags, want in [
        ("crash", ["--fault", "1:3:crash"], r"rank 1 of 2: error: injected fault at step 3"),
        ("exit", ["--fault", "1:3:exit"], r"rank 1|exited|exit code"),
        ("hang", ["--fault", "1:3:hang", "--timeout", "10"], r"rank 0 of 2: error: .*no progress for 10 s"),
    ]:
        t0 = time.time()
        try:
            rc, out, _ = train("fault_" + kind, "--steps", "200", *flags, gpus=2, timeout=120)
            elapsed = time.time() - t0
        except subprocess.TimeoutExpired as e:
            rc, out, elapsed = None, str(e), 999
        check(f"2 GPUs, rank 1 {kind}: the job ends (exit {rc}) in {elapsed:.0f} s < 90 s, naming the rank",
              rc not in (0, None) and elapsed < 90 and re.search(want, out) is not None, out[-2500:])
    # a rank killed from outside (SIGKILL): mpirun ends the job and names it
    log = os.path.join(TMP, "killed.txt")
    p = subprocess.Popen(["mpirun", "-np", "2", TRAINER] + BASE + ["--steps", "2000", "--log-file", log], env=MPI_ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid, text, t0 = None, "", time.time()
    for line in p.stdout:
        text += line
        m = re.search(r"rank 1 of 2: pid (\d+)", line)
        if m:
            pid = int(m.group(1))
        if pid and re.match(r"step:5/", line):
            break
    if pid:
        os.kill(pid, signal.SIGKILL)
        t0 = time.time()
    try:
        text += p.communicate(timeout=90)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        text += "\n(mpirun still running after 90 s)"
    elapsed = time.time() - t0
    check(f"2 GPUs, rank 1 killed (SIGKILL) at step 5: the job ends in {elapsed:.0f} s, naming rank 1 and the signal",
          pid is not None and p.returncode not in (0, None) and elapsed < 90 and re.search(r"rank 1.*(signal 9|Killed)", text, re.S) is not None,
          text[-2500:])
else:
    print("note: fewer than two GPUs (or no mpirun): the data-parallel checks were skipped")

shutil.rmtree(TMP, ignore_errors=True)
finish("training-gpu")
