"""Times PyTorch FlexAttention (compiled; block mask built outside the timed region) and SDPA
with the cuDNN backend on the shapes and masks of bench/bench_attention.cu, in the same run on
the same GPU, and prints the ratio table against that benchmark's JSON output (one file, or
several concatenated: each case records its own T, heads and head dim).

    python3 bench/compare_flex.py bench_attention.json [out.md]

Timing as the C++ benchmark: CUDA events, 3 warm-ups, median of 20, three input sets rotated.
Used only to compare against: the trainer never depends on PyTorch.
"""
import json
import os
import statistics
import sys

if len(sys.argv) not in (2, 3) or not os.path.isfile(sys.argv[1]):
    print(__doc__ + ("\ncompare_flex: error: %s: not a regular file" % sys.argv[1] if len(sys.argv) > 1 else ""), file=sys.stderr)
    sys.exit(2)
try:
    import torch
except ImportError:
    print("compare_flex: error: PyTorch is missing (this peer runs on a GPU machine that has it)", file=sys.stderr)
    sys.exit(1)
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

dev = "cuda"
ours = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
for c in ours:  # files written before the shape and the causal and prefix terms were recorded
    c.setdefault("T", 65536), c.setdefault("H", 6), c.setdefault("D", 128), c.setdefault("causal", 1), c.setdefault("prefix", 0)
torch._dynamo.config.recompile_limit = 64  # one compile per mask_mod closure
torch._dynamo.config.cache_size_limit = 64
flex = torch.compile(flex_attention, dynamic=False)


def bench_docs(T):
    ids, i, t = [], 0, 0
    while t < T:
        n = 500 + (i * 7919) % 1001
        ids += [i + 1] * n
        t += n
        i += 1
    doc = torch.tensor(ids[:T], device=dev, dtype=torch.int32)
    # the first position of each position's document (prefix-LM counts from there)
    pos = torch.arange(T, device=dev, dtype=torch.int32)
    new = torch.ones(T, device=dev, dtype=torch.bool)
    new[1:] = doc[1:] != doc[:-1]
    start = torch.cummax(torch.where(new, pos, torch.zeros_like(pos)), 0).values
    return doc, start


def make_mask(c, build_ms=None):
    """The mask of docs/masks.md as a FlexAttention mask_mod: AND of the terms, the prefix
    relaxing the causal one (k <= q or k - start(q) < P)."""
    T, W, blocks, bidir, docs, causal, P = c["T"], c["window"], c["blocks"], c["bidir"], c["docs"], c["causal"], c["prefix"]
    doc, start = bench_docs(T)
    if not docs:
        start = torch.zeros_like(start)

    def mod(b, h, q, kv):
        keep = q >= 0
        if causal:
            keep = q >= kv
            if P:
                keep = keep | (kv - start[q] < P)
        if W:
            dq, dk = (q // 128, kv // 128) if blocks else (q, kv)
            keep = keep & (((dq - dk).abs() if bidir else (dq - dk)) < W)
        if docs:
            keep = keep & (doc[q] == doc[kv])
        return keep
    bm = create_block_mask(mod, 1, 1, T, T, device=dev, _compile=True)
    if build_ms is not None:  # what a trainer that builds its block mask every step pays for it
        ms = []
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            create_block_mask(mod, 1, 1, T, T, device=dev, _compile=True)
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
        build_ms.append(statistics.median(ms))
    return bm


torch.manual_seed(0)
inputs = {}


def sets_for(T, H, D):
    """Three input sets and output gradients of one shape, made once."""
    if (T, H, D) not in inputs:
        inputs[(T, H, D)] = ([[torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
                              for _ in range(3)], [torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16) for _ in range(3)])
    return inputs[(T, H, D)]


def timed(fn, backward, shape):
    sets, grads = sets_for(*shape)
    ms = []
    for it in range(23):
        q, k, v = sets[it % 3]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        o = fn(q, k, v)
        if backward:
            o.backward(grads[it % 3])
        e.record()
        torch.cuda.synchronize()
        if it >= 3:
            ms.append(s.elapsed_time(e))
        for x in (q, k, v):
            x.grad = None
    return statistics.median(ms)


rows = []
for c in ours:
    shape = (c["T"], c["H"], c["D"])
    build = []
    bm = make_mask(c, build)
    f = timed(lambda q, k, v: flex(q, k, v, block_mask=bm), False, shape)
    fb = timed(lambda q, k, v: flex(q, k, v, block_mask=bm), True, shape)
    row = dict(case=c["case"], shape=shape, ours_f=c["fwd_ms"], ours_fb=c["fwdbwd_ms"], tf=c.get("fwd_tflops"),
               tfb=c.get("fwdbwd_tflops"), flex_f=f, flex_fb=fb, mask_ms=build[0], cudnn_f=None, cudnn_fb=None)
    if c["causal"] and c["window"] == 0 and not c["docs"] and not c["prefix"]:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            sd = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            row["cudnn_f"], row["cudnn_fb"] = timed(sd, False, shape), timed(sd, True, shape)
    rows.append(row)
    print(f"T={shape[0]} H={shape[1]} D={shape[2]} {c['case']}: flex {f:.3f} / {fb:.3f} ms", flush=True)

dev_name = torch.cuda.get_device_name()
lines = [f"Device: {dev_name}; PyTorch {torch.__version__}; bf16; times in ms (median of 20); our useful TFLOP/s count kept "
         "pairs only.", "",
         "| T, heads, head dim | mask | ours fwd | flex fwd | speed fwd | ours fwd+bwd | flex fwd+bwd | speed fwd+bwd | "
         "ours TF/s fwd, fwd+bwd | cuDNN fwd | cuDNN fwd+bwd | flex block mask build |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for r in rows:
    cd = (f"{r['cudnn_f']:.3f} ({r['cudnn_f'] / r['ours_f']:.2f}x)" if r["cudnn_f"] else "-",
          f"{r['cudnn_fb']:.3f} ({r['cudnn_fb'] / r['ours_fb']:.2f}x)" if r["cudnn_fb"] else "-")
    T, H, D = r["shape"]
    lines.append(f"| {T}, {H}, {D} | {r['case']} | {r['ours_f']:.3f} | {r['flex_f']:.3f} | {r['flex_f'] / r['ours_f']:.2f}x | "
                 f"{r['ours_fb']:.3f} | {r['flex_fb']:.3f} | {r['flex_fb'] / r['ours_fb']:.2f}x | {r['tf']}, {r['tfb']} | "
                 f"{cd[0]} | {cd[1]} | {r['mask_ms']:.2f} |")
lines.append("")
lines.append("Speed columns: other time / our time (above 1: ours is faster). cuDNN columns: its time and our speed relative to it. "
             "Block mask build: create_block_mask (compiled), median of 5 calls after the first, not in the flex times.")
text = "\n".join(lines)
print(text)
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write(text + "\n")
