"""The PyTorch peer (peer/torch_peer.py) on a GPU:
  - FlexAttention under the peer's block mask against a dense fp64 softmax under the mask of
    docs/masks.md, on random documents and windows (bf16 inputs: relative error below 2e-2 of
    the largest output, the bf16 bound the attention tests use);
  - whole short runs of the tiny shape, compiled, in both numerics, beside train_gpt's tiny preset
    on the same shards: step 0 reads ln(50304) (the head starts at zero), the loss falls, and the
    final validation loss is within 0.1 of train_gpt's (different initial draws: a check against
    gross defects; the learning comparison at the speedrun's size is docs/learning_gap.md's).

    python3 tests/test_torch_peer_gpu.py TRAIN_GLOB VAL_GLOB TRAIN_GPT
"""
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require; require("numpy", "torch", suite="torch-peer-gpu")  # noqa: E402,E702
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn.attention.flex_attention import flex_attention

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(root, "peer"))
sys.path.insert(0, os.path.join(root, "scripts"))
from harness import check, finish  # noqa: E402
import torch_peer as peer  # noqa: E402

train_glob, val_glob, train_gpt = sys.argv[1:4]
dev = torch.device("cuda")
rng = np.random.default_rng(11)
flex = torch.compile(flex_attention)
worst = 0.0
for case in range(12):
    T, H, D = 128 * int(rng.integers(2, 17)), 2, [64, 128][case % 2]
    mean = [40, 300, 5000][case % 3]
    tokens = np.where(rng.random(T) < 1 / mean, peer.BOS, rng.integers(0, 50256, T))
    docs = torch.from_numpy(peer.doc_ids(tokens)).to(dev)
    window, bi = [0, 1, 3, 8][case % 4], case % 5 == 0
    q, k, v = (torch.randn(1, H, T, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    got = flex(q, k, v, block_mask=peer.make_block_mask(docs, window, bi, T), scale=1 / math.sqrt(D)).double()
    qi, ki = torch.arange(T, device=dev)[:, None], torch.arange(T, device=dev)[None, :]
    keep = (ki <= qi) & (docs[:, None] == docs[None, :])
    if window:
        dist = qi // 128 - ki // 128
        keep &= (dist.abs() if bi else dist) < window
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(D)
    want = torch.softmax(s.masked_fill(~keep, -math.inf), -1) @ v.double()
    err = ((got - want).abs().max() / want.abs().max()).item()
    worst = max(worst, err)
    check(f"flex under the block mask, T {T} D {D} window {window} {'bi' if bi else 'uni'} ({err:.1e})", err < 2e-2)
print(f"FlexAttention with the peer's block masks: worst relative error {worst:.2e}")


def final_val(jsonl):
    vals = [json.loads(l) for l in open(jsonl) if '"val"' in l]
    return vals[0]["val_loss"], vals[-1]["val_loss"]


tiny = ["--layers", "2", "--width", "128", "--heads", "2", "--hidden", "512", "--seq-len", "1024", "--steps", "30",
        "--val-every", "10", "--val-tokens", "16384", "--train-data", train_glob, "--val-data", val_glob]
with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "tg.txt")
    r = subprocess.run([train_gpt, "--preset", "tiny", "--log-file", log] + tiny[8:], capture_output=True, text=True, timeout=300)
    check("train_gpt tiny runs", r.returncode == 0, r.stderr[-500:])
    tg0, tg = final_val(os.path.join(tmp, "tg.jsonl")) if r.returncode == 0 else (math.nan, math.nan)
    for numerics in ("record", "fp32"):
        log = os.path.join(tmp, f"peer_{numerics}.txt")
        r = subprocess.run([sys.executable, os.path.join(root, "peer", "torch_peer.py"), "--numerics", numerics, "--log-file", log] + tiny,
                           capture_output=True, text=True, timeout=600)
        ok = check(f"peer tiny runs ({numerics})", r.returncode == 0, r.stderr[-800:])
        if not ok:
            continue
        v0, v = final_val(os.path.join(tmp, f"peer_{numerics}.jsonl"))
        check(f"peer ({numerics}) step 0 reads ln(50304) ({v0:.5f})", abs(v0 - math.log(50304)) < 2e-3)
        check(f"peer ({numerics}) final validation loss {v:.4f} within 0.1 of train_gpt's {tg:.4f}", abs(v - tg) < 0.1)
        print(f"tiny, 30 steps: train_gpt {tg0:.4f} -> {tg:.4f}; peer ({numerics}) {v0:.4f} -> {v:.4f}")
finish("torch-peer-gpu")
