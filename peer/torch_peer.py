#!/usr/bin/env python3
"""A PyTorch peer of `train_gpt --preset speedrun`, for same-call speed ratios and for A/B tests
of learning against the record's numerics. Written from docs/model.md: the same model, optimiser,
schedules, data order and mask, compiled with torch.compile and attending with FlexAttention, as
the 2024-12-10 speedrun record does. It reads the same shards and writes the same logs (the
record's step lines, and JSON lines beside them), so scripts/speedrun_logs.py and the ablation
tools read its runs like train_gpt's.

    python3 peer/torch_peer.py --train-data 'data/gcide/gcide_train_*.bin' --steps 30 --window-blocks 8

Numerics (--numerics):
  record  the record's: the model is cast to bf16 and only its linear layers (the block matrices
          and the head) back to fp32, so the token and value embeddings and the scalars are bf16
          parameters, updated by fused Adam in bf16 state; linear weights are fp32 and cast to
          bf16 for each matmul.
  fp32    train_gpt's: every parameter and all optimiser state in fp32, cast to bf16 for use.
Everything else is computed identically in both.

Several GPUs, as the record's trainer runs on them: one process a GPU under torchrun,
    torchrun --standalone --nproc_per_node 2 peer/torch_peer.py --log-file logs/peer_2gpu.txt
The global batch stays --seqs-per-step sequences whatever the count N (which must divide it): each
rank runs N-th of them as micro-steps, in train_gpt's order (README.md "Data order"), under DDP
(gradients averaged over the ranks after the last micro-step); Muon's matrices are shared out over
the ranks, each rank orthogonalising its own and the updates all-gathered, as the record's Muon
does; validation is split round-robin and its loss summed over the ranks. Only rank 0 prints and
writes the logs. A rank that fails prints its error, naming itself, and exits, which ends the job.
Run without torchrun (or with one process) it is the one-GPU trainer, with no process group.

The parts (all in this file, top to bottom): the shards and the data order, the block mask of a
sequence, the model, Muon, the schedules, the ranks, the training loop and its logs. It needs
PyTorch 2.5 or newer with a CUDA GPU; train_gpt does not depend on it.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from shard_format import HEADER_BYTES, MAGIC, read_header  # noqa: E402,F401 (MAGIC: the tests write shards with it)
from tool_errors import ToolError, require, run  # noqa: E402
require("numpy")  # a message, not a traceback, without numpy (PyTorch is checked where it is first needed)
import numpy as np  # noqa: E402

BOS = 50256
BLOCK = 128  # FlexAttention's block and the window's unit


class PeerError(ToolError):
    """Bad input: a one-line message naming the file or flag."""


def process_start_time():
    """Wall time at which this process was launched (Linux: /proc), so start-up counts the imports."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(l.split()[1]) for l in f if l.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


LAUNCHED = process_start_time()


# ------------------------------------------------------------------------------ data
def read_shard(path, vocab):
    """A shard's tokens (docs/formats.md: 256 int32 header, then uint16 ids), checked whole: the
    header as train_gpt checks it (scripts/shard_format.py), then every id."""
    n = read_header(path)
    try:
        tokens = np.fromfile(path, dtype="<u2", count=n, offset=HEADER_BYTES)
    except OSError as e:
        raise PeerError(f"{path}: cannot read the shard: {e.strerror}")
    if tokens.size != n:
        raise PeerError(f"{path}: {tokens.size} of its {n} tokens read (the file changed while it was read)")
    if n and int(tokens.max()) >= vocab:
        raise PeerError(f"{path}: token id {int(tokens.max())} out of range (vocabulary {vocab})")
    return tokens


class TokenStream:
    """data/dataloader.h's order: the shards in order, sequence k is the (T + 1)-token window at
    k * T inside its shard (a tail shorter than a window is skipped), cycled when `cycle`."""

    def __init__(self, pattern, flag, T, vocab, cycle):
        self.files = sorted(glob.glob(pattern), key=os.fsencode)  # by bytes, as data/shard.h sorts them
        if not self.files:
            raise PeerError(f"{flag} {pattern}: no shard matches")
        self.T, self.vocab, self.cycle = T, vocab, cycle
        self.prefix = [0]
        for f in self.files:  # every header checked here, before any training: a bad shard is named at once
            n = read_header(f)
            self.prefix.append(self.prefix[-1] + ((n - 1) // T if n >= T + 1 else 0))
        if self.prefix[-1] == 0:
            raise PeerError(f"{flag} {pattern}: no shard holds a whole sequence of {T + 1} tokens")
        self.loaded, self.tokens = -1, None

    def sequence(self, k):
        total = self.prefix[-1]
        if k >= total:
            if not self.cycle:
                raise PeerError(f"sequence {k} is past the end of {self.files[-1]} ({total} sequences)")
            k %= total
        i = int(np.searchsorted(self.prefix, k, side="right")) - 1
        if i != self.loaded:
            self.tokens, self.loaded = read_shard(self.files[i], self.vocab), i
        start = (k - self.prefix[i]) * self.T
        return self.tokens[start:start + self.T + 1]


def train_sequence(step, micro, rank, world, seqs_per_step):
    """The training sequence of rank `rank` of `world` at micro-step `micro` of step `step` (0-based),
    train_gpt's rule (data/dataloader.h): step s uses sequences seqs_per_step * s ... + seqs_per_step
    - 1, whatever the world size; rank r at micro-step m takes seqs_per_step * s + m * world + r."""
    return seqs_per_step * step + micro * world + rank


def val_sequences(val_seqs, rank, world):
    """The validation sequences a rank evaluates: the first val_seqs, round-robin (train_gpt's
    data::val_sequences)."""
    return range(rank, val_seqs, world)


# ------------------------------------------------------------------------------ the mask
def doc_ids(tokens):
    """Number of BOS tokens at positions <= i (model/batch.h)."""
    return (tokens == BOS).cumsum(0)


def block_classes(docs, window_blocks, bidirectional, T):
    """For each pair (query block, key block) of 128 positions: whether any pair inside is kept,
    and whether all are, under causal AND same document AND the block window (q/128 - k/128 < N,
    or |q/128 - k/128| < N with --window-mask bi; N = 0: no window). Exact, from the first and
    last document id of each block (ids never decrease). docs: a numpy array or a torch tensor
    (the result is of the same kind). Returns (any, full), [T/128, T/128] bool."""
    nb = T // BLOCK
    d = docs.reshape(nb, BLOCK)
    first, last = d[:, 0], d[:, -1]
    if isinstance(docs, np.ndarray):
        blocks = np.arange(nb)
    else:
        import torch
        blocks = torch.arange(nb, device=docs.device)
    qb, kb = blocks[:, None], blocks[None, :]
    # a pair of blocks shares a document when their id ranges overlap; all pairs do when both
    # blocks lie in one and the same document
    doc_any = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])
    one_doc = first == last
    doc_full = one_doc[:, None] & one_doc[None, :] & (first[:, None] == first[None, :])
    any_ = (kb <= qb) & doc_any
    full = (kb < qb) & doc_full
    if window_blocks > 0:
        dist = abs(qb - kb) if bidirectional else qb - kb
        inside = dist < window_blocks  # whole blocks: a block pair is all in or all out
        any_, full = any_ & inside, full & inside
    return any_, full


def mask_mod_of(docs, window_blocks, bidirectional, T):
    """The mask per element as FlexAttention's mask_mod: causal AND same document AND the block
    window (no window when window_blocks is 0)."""
    import torch
    window = torch.tensor(window_blocks if window_blocks > 0 else T, device=docs.device)

    def mask_mod(b, h, q, k):
        dist = q // BLOCK - k // BLOCK
        dist = dist.abs() if bidirectional else dist
        return (k <= q) & (docs[q] == docs[k]) & (dist < window)
    return mask_mod


def make_block_mask(docs, window_blocks, bidirectional, T):
    """FlexAttention's BlockMask for one sequence: partial blocks evaluate mask_mod per element,
    full blocks skip it."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask
    any_, full = block_classes(docs, window_blocks, bidirectional, T)
    partial = any_ & ~full
    mask_mod = mask_mod_of(docs, window_blocks, bidirectional, T)

    def indices(m):
        return (m.sum(-1, dtype=torch.int32)[None, None].contiguous(),
                torch.argsort(m.to(torch.int32), dim=-1, descending=True, stable=True).to(torch.int32)[None, None].contiguous())

    kv_num, kv_idx = indices(partial)
    full_num, full_idx = indices(full)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=BLOCK, mask_mod=mask_mod)


# ------------------------------------------------------------------------------ the model
def build_model(args, torch, F, nn):
    from torch.nn.attention.flex_attention import flex_attention

    bf16 = torch.bfloat16
    C, H, L, V = args.width, args.heads, args.layers, args.vocab
    D = C // H
    eps = torch.finfo(bf16).eps  # the record's norms ran on bf16 tensors: eps 2^-7 (docs/model.md)

    def norm(x):
        return F.rms_norm(x, (x.size(-1),), eps=eps)

    def linear_weight(fan_in, fan_out, zero, gen):
        # [out][in] as nn.Linear stores it; uniform in +-1/sqrt(fan_in), or zero
        w = torch.zeros(fan_out, fan_in)
        if not zero:
            w.uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in), generator=gen)
        return nn.Parameter(w)

    class Block(nn.Module):
        def __init__(self, gen):
            super().__init__()
            self.wq, self.wk, self.wv = (linear_weight(C, C, False, gen) for _ in range(3))
            self.wo = linear_weight(C, C, True, gen)
            self.wfc = linear_weight(C, args.hidden, False, gen)
            self.wproj = linear_weight(args.hidden, C, True, gen)
            self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))
            self.attn_lambdas = nn.Parameter(torch.tensor([0.5, 0.5]))

        def matrices(self):
            return [self.wq, self.wk, self.wv, self.wo, self.wfc, self.wproj]

        def scalars(self):
            return [self.lambdas, self.attn_lambdas]

    class GPT(nn.Module):
        def __init__(self, seed):
            super().__init__()
            gen = torch.Generator().manual_seed(seed)
            self.embed = nn.Parameter(torch.randn(V, C, generator=gen))
            self.value_embeds = nn.ParameterList([nn.Parameter(torch.randn(V, C, generator=gen)) for _ in range(L // 2)])
            self.blocks = nn.ModuleList([Block(gen) for _ in range(L)])
            self.skip = nn.Parameter(torch.ones(L // 2))
            self.head = linear_weight(C, V, True, gen)
            half = D // 2
            freq = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)
            ang = torch.arange(args.seq_len, dtype=torch.float64)[:, None] * freq[None, :]
            self.register_buffer("cos", ang.cos().to(bf16)[None, :, None, :], persistent=False)
            self.register_buffer("sin", ang.sin().to(bf16)[None, :, None, :], persistent=False)

        def rotary(self, x):  # [1, T, H, D]
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x1 * self.cos + x2 * self.sin, -x1 * self.sin + x2 * self.cos], -1)

        def forward(self, idx, targets, block_mask):
            T = idx.size(0)
            x = norm(F.embedding(idx, self.embed).to(bf16))
            x0 = x
            pushed = []
            ve = [F.embedding(idx, t).to(bf16) for t in self.value_embeds]
            for i, blk in enumerate(self.blocks):
                wq, wk, wv, wo, wfc, wproj = (m.to(bf16) for m in blk.matrices())
                if i >= L // 2:
                    x = x + self.skip[i - L // 2].to(bf16) * pushed.pop()
                lam = blk.lambdas.to(bf16)
                x = lam[0] * x + lam[1] * x0
                h = norm(x)
                q, k, v = F.linear(h, wq), F.linear(h, wk), F.linear(h, wv)
                al = blk.attn_lambdas.to(bf16)
                v = al[0] * v + al[1] * ve[i if i < L // 2 else L - 1 - i]
                q, k, v = q.view(1, T, H, D), k.view(1, T, H, D), v.view(1, T, H, D)
                q, k = self.rotary(norm(q)), self.rotary(norm(k))
                y = flex_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block_mask,
                                   scale=1 / math.sqrt(D))
                x = x + F.linear(y.transpose(1, 2).reshape(T, C), wo)
                x = x + F.linear(F.relu(F.linear(norm(x), wfc)).square(), wproj)
                if i < L // 2:
                    pushed.append(x)
            logits = F.linear(norm(x), self.head.to(bf16)).float()
            logits = 30 * torch.tanh(logits / 30)
            return F.cross_entropy(logits, targets)

    return GPT


def newton_schulz(G, dtype="bfloat16"):
    """Muon's orthogonalisation (docs/model.md): five quintic iterations on the wide side, in bf16
    as the record computes them (tests/torch_model_check.py runs the same code in fp64, dtype None,
    against the fp64 reference optimiser)."""
    import torch
    X = G.to(getattr(torch, dtype)) if dtype else G
    X = X / (X.norm() + 1e-7)
    tall = X.size(0) > X.size(1)
    if tall:
        X = X.T
    for _ in range(5):
        A = X @ X.T
        X = 3.4445 * X + (-4.7750 * A + 2.0315 * A @ A) @ X
    return X.T if tall else X


def muon_plan(numels, world):
    """The record's share-out of Muon's matrices over `world` ranks, from their sizes (numel) in
    parameter order: the matrices are grouped by size (groups in order of first appearance), the
    i-th matrix of a group is orthogonalised on rank i % world, and a group's updates are exchanged
    in rounds of `world` matrices (one all-gather each), round j holding the group's matrices
    j * world ... j * world + world - 1. Returns [(numel, rounds)], each round a list of `world`
    parameter indices, None where the group has run out (that rank sends zeros, unused); the
    record asserted instead that each group divides evenly."""
    groups = {}
    for i, n in enumerate(numels):
        groups.setdefault(n, []).append(i)
    plan = []
    for n, members in groups.items():
        rounds = [members[b:b + world] for b in range(0, len(members), world)]
        plan.append((n, [r + [None] * (world - len(r)) for r in rounds]))
    return plan


def muon_owned(plan, rank):
    """The parameter indices that `rank` orthogonalises under `plan` (muon_plan's)."""
    return [r[rank] for _, rounds in plan for r in rounds if r[rank] is not None]


class Muon:
    """buf = m buf + (1 - m) g; u = (1 - m) g + m buf; W -= lr max(1, rows/cols)^0.5 NS(u) on the
    [out][in] weight (rows/cols of nn.Linear's layout: 2 for the MLP's up-projection).
    With world > 1 (the process group up), as the record's Muon: each rank keeps the momentum of and
    orthogonalises only its own matrices (muon_plan), the bf16 updates of each round are
    all-gathered while the next round's are computed, and every rank applies every update, so the
    weights stay identical on all ranks and equal, bit for bit, to what one rank would compute from
    the same gradients."""

    def __init__(self, params, orthogonalise, rank=0, world=1):
        import torch
        self.params = list(params)
        self.ns = orthogonalise
        self.rank, self.world = rank, world
        if world == 1:
            self.bufs = [torch.zeros_like(p) for p in self.params]
            return
        self.plan = muon_plan([p.numel() for p in self.params], world)
        self.bufs = {i: torch.zeros_like(self.params[i]) for i in muon_owned(self.plan, rank)}
        dev = self.params[0].device
        self.gathered = {n: [torch.empty(n, device=dev, dtype=torch.bfloat16) for _ in range(world)] for n, _ in self.plan}
        self.zeros = {n: torch.zeros(n, device=dev, dtype=torch.bfloat16) for n, _ in self.plan}

    def orthogonalised(self, p, buf, momentum):
        g = p.grad
        buf.mul_(momentum).add_(g, alpha=1 - momentum)
        u = g.mul(1 - momentum).add_(buf, alpha=momentum)
        return self.ns(u)

    @staticmethod
    def scale(p):
        return max(1.0, p.size(0) / p.size(1)) ** 0.5

    def step(self, lr, momentum):
        import torch
        with torch.no_grad():
            if self.world == 1:
                for p, buf in zip(self.params, self.bufs):
                    p.add_(self.orthogonalised(p, buf, momentum).to(p.dtype), alpha=-lr * self.scale(p))
                return
            import torch.distributed as dist
            pending = None

            def apply(pending):
                work, members, gathered = pending
                work.wait()
                for i, update in zip(members, gathered):
                    if i is not None:
                        p = self.params[i]
                        p.add_(update.view_as(p).to(p.dtype), alpha=-lr * self.scale(p))

            for n, rounds in self.plan:
                for members in rounds:
                    i = members[self.rank]
                    if i is None:
                        mine = self.zeros[n]
                    else:
                        mine = self.orthogonalised(self.params[i], self.bufs[i], momentum).flatten().to(torch.bfloat16)
                    if pending:
                        apply(pending)  # before the next all-gather reuses the buffers
                    pending = (dist.all_gather(self.gathered[n], mine, async_op=True), members, self.gathered[n])
            if pending:
                apply(pending)


# ------------------------------------------------------------------------------ schedules
def schedules(steps):
    """model/config.h's, with the cooldown and momentum warm-up scaled to `steps` as train_gpt does."""
    cooldown = max(1, math.floor(steps * 600 / 1480 + 0.5))  # std::lround: halves away from zero
    warmup = max(1, math.floor(steps * 300 / 1480 + 0.5))

    def lr_mult(s):
        return 1.0 if s < steps - cooldown else (steps - s) / cooldown

    def momentum(s):
        f = min(1.0, s / warmup)
        return (1 - f) * 0.85 + f * 0.95

    def window(s):
        f = s / steps
        return int(math.floor(((1 - f) * 64 + f * 1792 + 64) / 128))

    return lr_mult, momentum, window


# ------------------------------------------------------------------------------ logs
class Log:
    """The record's step lines on stdout and in LOG, and JSON lines in LOG's .jsonl (train_gpt's
    events: config, val, step, summary). Both files must be new. A quiet log (the ranks but 0)
    neither prints nor writes."""

    def __init__(self, path, run_id, quiet=False):
        self.txt = self.jsonl = None
        self.quiet = quiet
        if path and not quiet:
            side = self.refuse_existing(path)
            d = os.path.dirname(path)
            if d:
                os.makedirs(d, exist_ok=True)
            self.txt, self.jsonl = open(path, "x"), open(side, "x")
        self.line(f"run_id:{run_id} torch_peer")

    @staticmethod
    def refuse_existing(path):
        """Raises PeerError when LOG or its .jsonl exists; returns the .jsonl's path."""
        side = os.path.splitext(path)[0] + ".jsonl"
        for p in (path, side) if path else ():
            if os.path.lexists(p):
                raise PeerError(f"--log-file {path}: {p} exists: give each run a log of its own")
        return side

    def line(self, text):
        if self.quiet:
            return
        print(text, flush=True)
        if self.txt:
            self.txt.write(text + "\n")
            self.txt.flush()

    def event(self, obj):
        if self.jsonl:
            self.jsonl.write(json.dumps(obj) + "\n")
            self.jsonl.flush()

    def step(self, step, total, train_ms, timed, val_loss=None, train_loss=None):
        avg = f"{train_ms / timed:.2f}" if timed > 0 else "nan"
        loss = f"val_loss:{val_loss:.4f} " if val_loss is not None else f"train_loss:{train_loss:.4f} "
        self.line(f"step:{step}/{total} {loss}train_time:{train_ms:.0f}ms step_avg:{avg}ms")
        ev = {"event": "val" if val_loss is not None else "step", "step": step, "total_steps": total, "train_time_ms": round(train_ms, 3)}
        ev.update({"val_loss": val_loss} if val_loss is not None else {"train_loss": train_loss})
        self.event(ev)


# ------------------------------------------------------------------------------ the ranks
class Ranks:
    """This process's place in the job: rank, local_rank (its GPU on the host), world, local_world
    (processes on this host), and up: whether the process group has been started."""

    def __init__(self, rank=0, local_rank=0, world=1, local_world=1):
        self.rank, self.local_rank, self.world, self.local_world = rank, local_rank, world, local_world
        self.up = False


def ranks_from_env(environ):
    """torchrun's RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE; one process without WORLD_SIZE."""
    if "WORLD_SIZE" not in environ:
        return Ranks()
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    got = {k: environ.get(k, environ["WORLD_SIZE"] if k == "LOCAL_WORLD_SIZE" else "") for k in names}
    try:
        rank, local_rank, world, local_world = (int(got[k]) for k in names)
    except ValueError:
        raise PeerError("RANK, LOCAL_RANK and WORLD_SIZE must be whole numbers (torchrun sets them): got "
                        + ", ".join(f"{k}={got[k]!r}" for k in names[:3]))
    if not (1 <= local_world <= world and 0 <= rank < world and 0 <= local_rank < local_world):
        raise PeerError(f"RANK {rank}, LOCAL_RANK {local_rank}, WORLD_SIZE {world}, LOCAL_WORLD_SIZE {local_world}: "
                        "not a rank of the job (torchrun sets them)")
    return Ranks(rank, local_rank, world, local_world)


class Parser(argparse.ArgumentParser):
    """argparse, silent on the ranks but 0 (each rank reads the same flags: one message is enough)."""

    quiet = False

    def error(self, message):
        if self.quiet:
            sys.exit(2)
        super().error(message)


# ------------------------------------------------------------------------------ training
def parse_args(argv, world=1, quiet=False):
    p = Parser(prog="torch_peer", description=__doc__.split("\n\n")[0])
    p.quiet = quiet
    p.add_argument("--train-data", default="data/gcide/gcide_train_*.bin", help="glob of training shards")
    p.add_argument("--val-data", default="data/gcide/gcide_val_*.bin", help="glob of validation shards")
    p.add_argument("--vocab-size", type=int, default=50257, help="token ids must be below this")
    p.add_argument("--vocab", type=int, default=50304, help="rows of the embeddings and the head")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--hidden", type=int, default=3072)
    p.add_argument("--seq-len", type=int, default=65536)
    p.add_argument("--seqs-per-step", type=int, default=8)
    p.add_argument("--steps", type=int, default=1480)
    p.add_argument("--window-blocks", type=int, default=0, help="fixed window in blocks of 128; 0: the record's schedule")
    p.add_argument("--window-mask", choices=["uni", "bi"], default="uni")
    p.add_argument("--numerics", choices=["record", "fp32"], default="record")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--val-every", type=int, default=125)
    p.add_argument("--val-tokens", type=int, default=10485760)
    p.add_argument("--log-file", default="", help="the step lines (and JSON lines beside it); must not exist yet")
    p.add_argument("--compile", type=int, choices=[0, 1], default=1, help="1: torch.compile the model and Muon's iteration")
    p.add_argument("--fault", default="", metavar="RANK:STEP", help="rank RANK fails at step STEP (from 1): the error path's test")
    a = p.parse_args(argv)
    for flag, v, lo in (("--layers", a.layers, 2), ("--width", a.width, 8), ("--heads", a.heads, 1), ("--hidden", a.hidden, 8),
                        ("--seq-len", a.seq_len, BLOCK), ("--seqs-per-step", a.seqs_per_step, 1), ("--steps", a.steps, 1),
                        ("--val-every", a.val_every, 1), ("--val-tokens", a.val_tokens, 1), ("--vocab-size", a.vocab_size, 1),
                        ("--window-blocks", a.window_blocks, 0)):
        if v < lo:
            p.error(f"{flag} {v}: must be at least {lo}")
    if a.layers % 2:
        p.error(f"--layers {a.layers}: must be even (the U-net pairs layers)")
    if a.width % a.heads or (a.width // a.heads) % 2:
        p.error(f"--heads {a.heads}: must divide --width {a.width} into even head sizes")
    if a.seq_len % BLOCK:
        p.error(f"--seq-len {a.seq_len}: must be a multiple of {BLOCK} (FlexAttention's block)")
    if a.vocab < a.vocab_size:
        p.error(f"--vocab {a.vocab}: must hold --vocab-size {a.vocab_size}")
    if a.val_tokens < a.seq_len:
        p.error(f"--val-tokens {a.val_tokens}: less than one sequence of --seq-len {a.seq_len}")
    if a.seqs_per_step % world:
        ok = ", ".join(str(n) for n in range(1, a.seqs_per_step + 1) if a.seqs_per_step % n == 0)
        p.error(f"--seqs-per-step {a.seqs_per_step}: the global batch of {a.seqs_per_step} sequences does not split over "
                f"{world} GPUs (WORLD_SIZE); GPU counts that work: {ok}")
    a.fault_at = None
    if a.fault:
        parts = a.fault.split(":")
        if len(parts) != 2 or not all(x.isascii() and x.isdigit() for x in parts) or int(parts[0]) >= world or int(parts[1]) < 1:
            p.error(f"--fault {a.fault}: want RANK:STEP, a rank below {world} and a step from 1")
        a.fault_at = (int(parts[0]), int(parts[1]))
    return a


def train(a, ranks):
    rank, world = ranks.rank, ranks.world
    micro = a.seqs_per_step // world  # micro-steps of one sequence a rank runs each step
    # everything that needs no GPU is checked first, the same on every rank: the shards, the log
    train_stream = TokenStream(a.train_data, "--train-data", a.seq_len, a.vocab_size, cycle=True)
    val_stream = TokenStream(a.val_data, "--val-data", a.seq_len, a.vocab_size, cycle=False)
    val_seqs = a.val_tokens // a.seq_len
    if val_seqs > val_stream.prefix[-1]:
        raise PeerError(f"--val-tokens {a.val_tokens}: {val_seqs} sequences asked, {a.val_data} holds {val_stream.prefix[-1]}")
    train_stream.sequence(0), val_stream.sequence(0)  # the first shards, read and checked whole
    Log.refuse_existing(a.log_file)
    import contextlib
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        raise PeerError(f"PyTorch is needed ({e}); train_gpt itself does not need it")
    if not torch.cuda.is_available():
        raise PeerError("no CUDA GPU visible to PyTorch")
    if world == 1:
        dev = torch.device("cuda")
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if torch.cuda.device_count() < ranks.local_world:
            raise PeerError(f"{ranks.local_world} processes on this host but {torch.cuda.device_count()} GPU(s) visible: "
                            "one process a GPU")
        dev = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(dev)
        dist.init_process_group(backend="nccl", device_id=dev)
        ranks.up = True
        dist.barrier()  # every rank has checked that the log is new before rank 0 makes it
    run_id = hashlib.sha256(f"{time.time_ns()} {os.getpid()}".encode()).hexdigest()[:16]
    log = Log(a.log_file, run_id, quiet=rank > 0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch._dynamo.config.cache_size_limit = 64

    model = build_model(a, torch, F, nn)(a.seed).to(dev)
    embeds = [model.embed, *model.value_embeds]
    scalars = [p for b in model.blocks for p in b.scalars()] + [model.skip]
    if a.numerics == "record":  # the record: model.bfloat16(), then the linear layers back to fp32
        for p in embeds + scalars:
            p.data = p.data.to(torch.bfloat16)
    groups = [dict(params=embeds, lr=0.6), dict(params=[model.head], lr=0.008), dict(params=scalars, lr=0.04)]
    for g in groups:
        g["base_lr"] = g["lr"]
    adam = torch.optim.Adam(groups, betas=(0.8, 0.95), eps=1e-8, fused=True)
    muon = Muon([p for b in model.blocks for p in b.matrices()], torch.compile(newton_schulz) if a.compile else newton_schulz,
                rank, world)
    # one graph, as the record's; on one GPU a break is an error (under DDP the record's plain
    # torch.compile: the model is the same, and the splits at the buckets are the backend's own)
    fwd = torch.compile(model, fullgraph=world == 1) if a.compile else model
    net = fwd
    if world > 1:
        # as the record: the compiled model inside DDP (whose default 25 MB buckets split the compiled
        # graph, so that each bucket's all-reduce starts while the backward goes on), buffers not
        # broadcast (the rotary tables are the same everywhere), gradients kept in the buckets.
        # The constructor broadcasts rank 0's weights (all ranks drew the same from --seed).
        net = DDP(fwd, device_ids=[ranks.local_rank], broadcast_buffers=False, gradient_as_bucket_view=True)
    lr_mult, momentum, window_sched = schedules(a.steps)
    n_params = sum(p.numel() for p in model.parameters())
    log.event({"event": "config", "trainer": "torch_peer", "run_id": run_id, "train_data": a.train_data, "val_data": a.val_data,
               "layers": a.layers, "width": a.width, "heads": a.heads, "hidden": a.hidden, "vocab": a.vocab, "seq_len": a.seq_len,
               "seqs_per_step": a.seqs_per_step, "steps": a.steps, "val_every": a.val_every, "val_tokens": a.val_tokens,
               "window_blocks": a.window_blocks, "window_mask": a.window_mask, "window_granularity": "block", "causal": 1,
               "doc_mask": 1, "numerics": a.numerics, "seed": a.seed, "world_size": world, "gpu": torch.cuda.get_device_name(),
               "torch": torch.__version__, "compile": a.compile, "git_commit": os.environ.get("GIT_COMMIT", "")})
    on = f", {world} GPUs ({micro} micro-steps of one sequence each)" if world > 1 else ""
    log.line(f"torch_peer: {torch.cuda.get_device_name()}, torch {torch.__version__}, {n_params} parameters, "
             f"{a.steps} steps of {a.seq_len * a.seqs_per_step} tokens, numerics {a.numerics}{on}")

    def batch(stream, k, window):
        seq = torch.from_numpy(stream.sequence(k).astype(np.int64)).to(dev, non_blocking=True)
        x, y = seq[:-1], seq[1:]
        return x, y, make_block_mask(doc_ids(x), window, a.window_mask == "bi", a.seq_len)

    train_ms, timed, step_ms = 0.0, 0, []
    first_step_done = None  # seconds from launch

    def validate(step, window):
        with torch.no_grad():
            total = torch.zeros((), device=dev)
            for k in val_sequences(val_seqs, rank, world):
                total += fwd(*batch(val_stream, k, window))
        if world > 1:
            dist.all_reduce(total)  # the sum over all ranks' sequences
        loss = (total / val_seqs).item()
        log.step(step, a.steps, train_ms, timed, val_loss=loss)
        if not math.isfinite(loss):
            raise PeerError(f"validation loss is {loss} at step {step}")

    for step in range(a.steps + 1):
        window = a.window_blocks or window_sched(step)
        if step % a.val_every == 0 or step == a.steps:
            validate(step, window)
        if step == a.steps:
            break
        if a.fault_at == (rank, step + 1):
            raise PeerError(f"injected fault at step {step + 1}")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = torch.zeros((), device=dev)
        for m in range(micro):
            # the gradients are summed over the micro-steps here and averaged over the ranks by DDP
            # in the last one's backward: each loss scaled by 1 / micro gives the mean over the batch
            k = train_sequence(step, m, rank, world, a.seqs_per_step)
            with net.no_sync() if world > 1 and m < micro - 1 else contextlib.nullcontext():
                l = net(*batch(train_stream, k, window))
                (l / micro).backward()
            loss += l.detach()
        for g in adam.param_groups:
            g["lr"] = g["base_lr"] * lr_mult(step)
        adam.step()
        muon.step(0.05 * lr_mult(step), momentum(step))
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        if world > 1:
            dist.all_reduce(loss)  # after the clock: the logged loss is the whole batch's, as on one GPU
        if first_step_done is None:
            first_step_done = time.time() - LAUNCHED
            log.line(f"torch_peer: start-up {first_step_done:.1f} s (launch to the end of the first training step: imports, "
                     f"compilation and the step-0 validation included)")
            log.event({"event": "startup", "startup_s": first_step_done})
        if step >= 10:  # steps 11, 12, ... (1-based) are timed, as in the record
            train_ms += ms
            timed += 1
            step_ms.append(ms)
        train_loss = (loss / a.seqs_per_step).item()
        log.step(step + 1, a.steps, train_ms, timed, train_loss=train_loss)
        if not math.isfinite(train_loss):
            raise PeerError(f"training loss is {train_loss} at step {step + 1}")

    peak = torch.cuda.max_memory_allocated() / 2 ** 20
    summary = {"event": "summary", "timed_steps": timed, "median_step_ms": float(np.median(step_ms)) if step_ms else None,
               "tokens_per_s": a.seq_len * a.seqs_per_step * timed / (train_ms / 1e3) if timed else None,
               "peak_memory_mib": peak, "peak_reserved_mib": torch.cuda.max_memory_reserved() / 2 ** 20}
    log.event(summary)
    if timed:
        log.line(f"torch_peer: {timed} timed steps: median {summary['median_step_ms']:.1f} ms a step, "
                 f"{summary['tokens_per_s']:.0f} tokens/s")
    log.line(f"torch_peer: done; peak GPU memory {peak:.0f} MiB allocated, {summary['peak_reserved_mib']:.0f} MiB reserved"
             + (" (rank 0's)" if world > 1 else ""))
    if world > 1:
        dist.destroy_process_group()
    return 0


def main(argv):
    ranks = ranks_from_env(os.environ)
    a = parse_args(argv, ranks.world, quiet=ranks.rank > 0)
    if ranks.world == 1:
        return train(a, ranks)
    try:
        return train(a, ranks)
    except Exception as e:
        if not ranks.up:
            # before the process group: the checks of the flags, shards and log are the same on every
            # rank, so rank 0 says what is wrong and the others end quietly with it
            if ranks.rank == 0 or not isinstance(e, (ToolError, OSError, ValueError)):
                raise
            return 1
        # a rank's own failure, the process group up: say which rank and why, then leave at once;
        # torchrun ends the other ranks (which may be waiting on this one in a collective)
        if isinstance(e, ToolError):
            what = str(e)
        else:
            import traceback
            traceback.print_exc()
            what = f"{type(e).__name__}: {e}".splitlines()[0]
        print(f"torch_peer: error: rank {ranks.rank} of {ranks.world}: {what}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "torch_peer")
