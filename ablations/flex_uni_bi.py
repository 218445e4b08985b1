#!/usr/bin/env python3
"""Where a uni/bi speed difference can come from in a FlexAttention trainer, measured in one run
on the speedrun's attention (T 65536, 6 heads of 128, causal, documents of FineWeb-like length,
a window of N blocks of 128): the uni mask keeps q/128 - k/128 < N, the bi mask |q/128 - k/128| < N.
Under causal both keep exactly the same pairs, so any difference is the trainer's cost, not the
model's:

  1. building the block mask: create_block_mask (compiled) with each mask_mod, the way a trainer
     that rebuilds its mask every step pays for it; and the exact builder of peer/torch_peer.py,
     which classifies blocks from document ids and gives uni and bi the same blocks;
  2. the kernel on identical blocks: FlexAttention forward and forward + backward with the uni
     and the bi block mask (their block lists are checked equal), and whether the outputs and
     gradients are bitwise equal.

Each measurement alternates uni and bi for ROUNDS rounds (CUDA events, median of 20 calls a round
after 3 warm-ups); the table gives the median over rounds and the min-max across them.

    python3 ablations/flex_uni_bi.py [--window-blocks 8] [--rounds 5] [--json out.json]
"""
import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require; require("numpy")  # noqa: E402,E702 (a message, not a traceback, without numpy)
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peer"))
import torch_peer as peer  # noqa: E402

p = argparse.ArgumentParser(prog="flex_uni_bi", description=__doc__.split("\n\n")[0])
p.add_argument("--window-blocks", type=int, default=8)
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--seq-len", type=int, default=65536)
p.add_argument("--heads", type=int, default=6)
p.add_argument("--head-dim", type=int, default=128)
p.add_argument("--json", default="")
a = p.parse_args()
if a.window_blocks < 1 or a.rounds < 1 or a.seq_len % 128 or a.seq_len < 128:
    p.error("--window-blocks and --rounds must be at least 1, --seq-len a multiple of 128")
try:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError as e:
    sys.exit(f"flex_uni_bi: error: PyTorch with FlexAttention is needed ({e})")
if not torch.cuda.is_available():
    sys.exit("flex_uni_bi: error: no CUDA GPU visible to PyTorch")
if a.json and os.path.lexists(a.json):
    sys.exit(f"flex_uni_bi: error: --json {a.json} exists: name a new file")
dev = torch.device("cuda")
T, H, D, N = a.seq_len, a.heads, a.head_dim, a.window_blocks
torch.manual_seed(0)
rng = np.random.default_rng(0)
# FineWeb-like documents: exponential lengths of mean 1000 (scripts/synthetic_shards.py's)
tokens = rng.integers(0, peer.BOS, T)
pos = 0
while pos < T:
    tokens[pos] = peer.BOS
    pos += max(2, int(rng.exponential(1000)))
docs = torch.from_numpy(peer.doc_ids(tokens)).to(dev)


def cuda_ms(fn, reps=20, warm=3):
    out = []
    for i in range(reps + warm):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        if i >= warm:
            out.append(s.elapsed_time(e))
    return statistics.median(out)


mods = {"uni": peer.mask_mod_of(docs, N, False, T), "bi": peer.mask_mod_of(docs, N, True, T)}  # the peer's, per element
builders = {
    "create_block_mask uni": lambda: create_block_mask(mods["uni"], 1, 1, T, T, device=dev, _compile=True),
    "create_block_mask bi": lambda: create_block_mask(mods["bi"], 1, 1, T, T, device=dev, _compile=True),
    "exact builder uni": lambda: peer.make_block_mask(docs, N, False, T),
    "exact builder bi": lambda: peer.make_block_mask(docs, N, True, T),
}
masks = {k: f() for k, f in builders.items()}


def block_lists(bm):
    """The sorted (q block, kv block) pairs of the partial and of the full blocks."""
    out = []
    for num, idx in ((bm.kv_num_blocks, bm.kv_indices), (bm.full_kv_num_blocks, bm.full_kv_indices)):
        num, idx = num[0, 0].cpu(), idx[0, 0].cpu()
        out.append(sorted((qb, int(k)) for qb in range(num.numel()) for k in idx[qb, :num[qb]]))
    return out


ref_lists = block_lists(masks["create_block_mask uni"])
lists_equal = {k: block_lists(m) == ref_lists for k, m in masks.items()}
flex = torch.compile(flex_attention, dynamic=False)
q, k, v = (torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
go = torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16)


def fwd(bm):
    with torch.no_grad():
        flex(q, k, v, block_mask=bm, scale=1 / math.sqrt(D))


def fwd_bwd(bm):
    o = flex(q, k, v, block_mask=bm, scale=1 / math.sqrt(D))
    o.backward(go)
    for x in (q, k, v):
        x.grad = None


outs = {}
for name in ("create_block_mask uni", "create_block_mask bi"):
    o = flex(q, k, v, block_mask=masks[name], scale=1 / math.sqrt(D))
    o.backward(go)
    outs[name] = [o.detach().clone()] + [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
bitwise = all(torch.equal(x, y) for x, y in zip(outs["create_block_mask uni"], outs["create_block_mask bi"]))

times = {}
for r in range(a.rounds):
    for variant in ("uni", "bi"):  # alternating, so a drift of the machine falls on both
        for what, fn in ((f"create_block_mask {variant}", builders[f"create_block_mask {variant}"]),
                         (f"exact builder {variant}", builders[f"exact builder {variant}"]),
                         (f"flex forward {variant}", lambda: fwd(masks[f"create_block_mask {variant}"])),
                         (f"flex forward+backward {variant}", lambda: fwd_bwd(masks[f"create_block_mask {variant}"]))):
            times.setdefault(what, []).append(cuda_ms(fn))

print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: T {T}, {H} heads of {D}, causal + documents "
      f"({int(docs[-1].item())} in the sequence) + window of {N} blocks, {a.rounds} rounds alternating uni and bi")
print(f"block lists equal to create_block_mask uni's: {lists_equal}")
print(f"uni and bi outputs and gradients bitwise equal: {bitwise}")
print(f"{'measurement':<34} {'median ms':>10} {'min-max over rounds':>22}")
for what, ms in times.items():
    print(f"{what:<34} {statistics.median(ms):>10.3f} {min(ms):>10.3f} - {max(ms):<10.3f}")
for what in ("create_block_mask", "exact builder", "flex forward", "flex forward+backward"):
    u, b = statistics.median(times[f"{what} uni"]), statistics.median(times[f"{what} bi"])
    print(f"{what}: bi / uni = {b / u:.3f}")
if a.json:
    with open(a.json, "x") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "T": T, "heads": H, "head_dim": D,
                   "window_blocks": N, "rounds": a.rounds, "block_lists_equal": lists_equal, "bitwise_equal": bitwise,
                   "times_ms": times}, f, indent=1)
