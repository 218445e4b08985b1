"""Times PyTorch FlexAttention (compiled; block mask built outside the timed region) and SDPA
with the cuDNN backend on the shapes and masks of bench/bench_attention.cu, in the same run on
the same GPU, and prints the ratio table against that benchmark's JSON output.

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

T, H, D = 65536, 6, 128
dev = "cuda"
ours = [json.loads(line) for line in open(sys.argv[1])]
torch._dynamo.config.recompile_limit = 64  # one compile per mask_mod closure
torch._dynamo.config.cache_size_limit = 64
flex = torch.compile(flex_attention, dynamic=False)


def bench_docs():
    ids, i, t = [], 0, 0
    while t < T:
        n = 500 + (i * 7919) % 1001
        ids += [i + 1] * n
        t += n
        i += 1
    return torch.tensor(ids[:T], device=dev, dtype=torch.int32)


doc = bench_docs()


def make_mask(c):
    W, blocks, bidir, docs = c["window"], c["blocks"], c["bidir"], c["docs"]

    def mod(b, h, q, kv):
        keep = q >= kv
        if W:
            dq, dk = (q // 128, kv // 128) if blocks else (q, kv)
            keep = keep & (((dq - dk).abs() if bidir else (dq - dk)) < W)
        if docs:
            keep = keep & (doc[q] == doc[kv])
        return keep
    return create_block_mask(mod, 1, 1, T, T, device=dev)


torch.manual_seed(0)
sets = [[torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)] for _ in range(3)]
grads = [torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16) for _ in range(3)]


def timed(fn, backward):
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
    bm = make_mask(c)
    f = timed(lambda q, k, v: flex(q, k, v, block_mask=bm), False)
    fb = timed(lambda q, k, v: flex(q, k, v, block_mask=bm), True)
    row = dict(case=c["case"], ours_f=c["fwd_ms"], ours_fb=c["fwdbwd_ms"], flex_f=f, flex_fb=fb, cudnn_f=None, cudnn_fb=None)
    if c["window"] == 0 and not c["docs"]:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            sd = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            row["cudnn_f"], row["cudnn_fb"] = timed(sd, False), timed(sd, True)
    rows.append(row)
    print(f"{c['case']}: flex {f:.3f} / {fb:.3f} ms", flush=True)

dev_name = torch.cuda.get_device_name()
lines = [f"Device: {dev_name}; PyTorch {torch.__version__}; T={T} H={H} D={D} bf16; times in ms (median of 20).", "",
         "| mask | ours fwd | flex fwd | ours/flex speed fwd | ours fwd+bwd | flex fwd+bwd | speed fwd+bwd | cuDNN fwd | cuDNN fwd+bwd |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for r in rows:
    cd = (f"{r['cudnn_f']:.3f} ({r['cudnn_f'] / r['ours_f']:.2f}x)" if r["cudnn_f"] else "-",
          f"{r['cudnn_fb']:.3f} ({r['cudnn_fb'] / r['ours_fb']:.2f}x)" if r["cudnn_fb"] else "-")
    lines.append(f"| {r['case']} | {r['ours_f']:.3f} | {r['flex_f']:.3f} | {r['flex_f'] / r['ours_f']:.2f}x | "
                 f"{r['ours_fb']:.3f} | {r['flex_fb']:.3f} | {r['flex_fb'] / r['ours_fb']:.2f}x | {cd[0]} | {cd[1]} |")
lines.append("")
lines.append("Speed columns: other time / our time (above 1: ours is faster). cuDNN columns: its time and our speed relative to it.")
text = "\n".join(lines)
print(text)
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write(text + "\n")
