"""The fp64 reference model against an independent PyTorch implementation of docs/model.md
(written here from the spec, gradients by autograd), on the tiny configuration that
build/model_dump writes. Compares loss, logits and every parameter's gradient in fp64:
both sides are exact to rounding, so the bound is 1e-9 relative to each tensor's largest entry.

    python3 tests/torch_model_check.py BUILD_DIR        (needs PyTorch: the GPU machine has it)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require; require("numpy", "torch", suite="torch-model")  # noqa: E402,E702
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peer"))
import torch_peer  # noqa: E402

build = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    subprocess.run([os.path.join(build, "model_dump"), d], check=True, capture_output=True)
    m = json.load(open(os.path.join(d, "manifest.json")))
    params = np.fromfile(os.path.join(d, "params.f64"), dtype="<f8")
    grad_ref = np.fromfile(os.path.join(d, "grad.f64"), dtype="<f8")
    logits_ref = np.fromfile(os.path.join(d, "logits.f64"), dtype="<f8")
    after3_ref = np.fromfile(os.path.join(d, "params_after3.f64"), dtype="<f8")

torch.set_default_dtype(torch.float64)
P = {t["name"]: torch.tensor(params[t["offset"]:t["offset"] + t["rows"] * t["cols"]].reshape(t["rows"], t["cols"]),
                             requires_grad=True) for t in m["tensors"]}
V, C, H, L, eps = m["vocab"], m["width"], m["heads"], m["layers"], m["eps"]
Dh = C // H
tok = torch.tensor(m["tokens"])
tgt = torch.tensor(m["targets"])
doc = torch.tensor(m["doc_ids"])
T = len(tok)


def norm(x):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


# mask from the table of docs/masks.md
qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
keep = ki <= qi if m["mask"]["causal"] else torch.ones(T, T, dtype=torch.bool)
W = m["mask"]["window"]
if W:
    a, b = (qi // 128, ki // 128) if m["mask"]["blocks"] else (qi, ki)
    keep = keep & (((a - b).abs() if m["mask"]["bidir"] else (a - b)) < W)
keep = keep & (doc[:, None] == doc[None, :])

half = Dh // 2
freq = 10000.0 ** (-torch.arange(half) / half)
ang = torch.arange(T)[:, None] * freq[None, :]
cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]


def rotary(x):  # x [T, H, Dh]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], -1)


def model_loss(P):
    """Loss and logits of docs/model.md."""
    x = norm(P["embed"][tok])
    x0 = x
    pushed = []
    for i in range(L):
        if i >= L // 2:
            x = x + P["skip"][0, i - L // 2] * pushed.pop()
        lam = P[f"layer{i}.lambda"][0]
        x = lam[0] * x + lam[1] * x0
        h = norm(x)
        q, k, v = h @ P[f"layer{i}.wq"], h @ P[f"layer{i}.wk"], h @ P[f"layer{i}.wv"]
        table = i if i < L // 2 else L - 1 - i
        al = P[f"layer{i}.attn_lambda"][0]
        v = al[0] * v + al[1] * P[f"value_embed.{table}"][tok]
        q, k, v = q.view(T, H, Dh), k.view(T, H, Dh), v.view(T, H, Dh)
        q, k = rotary(norm(q)), rotary(norm(k))
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(Dh)
        s = s.masked_fill(~keep[None], float("-inf"))
        y = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, C)
        x = x + y @ P[f"layer{i}.wo"]
        x = x + torch.relu(norm(x) @ P[f"layer{i}.wfc"]) ** 2 @ P[f"layer{i}.wproj"]
        if i < L // 2:
            pushed.append(x)
    logits = 30 * torch.tanh(norm(x) @ P["head"] / 30)
    return torch.nn.functional.cross_entropy(logits, tgt), logits


loss, logits = model_loss(P)
loss.backward()

check("loss", abs(loss.item() - m["loss"]) < 1e-12, f"torch {loss.item():.15f} reference {m['loss']:.15f}")
check("logits", np.abs(logits.detach().numpy().ravel() - logits_ref).max() < 1e-10)
worst = 0.0
for t in m["tensors"]:
    g = P[t["name"]].grad.numpy().ravel()
    r = grad_ref[t["offset"]:t["offset"] + t["rows"] * t["cols"]]
    err = np.abs(g - r).max() / max(np.abs(r).max(), 1e-30)
    worst = max(worst, err)
    check(f"grad {t['name']} ({err:.1e})", err < 1e-9 and np.abs(r).max() > 0)

# three optimiser steps from docs/model.md, optimisation: torch.optim.Adam for the embeddings, head and scalars;
# Muon: the iteration is peer/torch_peer.py's (so the peer's is checked here too), the update written here
sch = m["schedule"]


def lr_mult(step):
    return 1.0 if step < sch["steps"] - sch["cooldown"] else (sch["steps"] - step) / sch["cooldown"]


def momentum(step):
    f = min(1.0, step / sch["momentum_warmup"])
    return (1 - f) * 0.85 + f * 0.95


def newton_schulz(g):
    return torch_peer.newton_schulz(g, dtype=None)  # the peer's iteration, here in fp64


Q = {k: torch.tensor(v.detach().numpy().copy(), requires_grad=True) for k, v in P.items()}
matrices = [k for k in Q if k.split(".")[-1] in ("wq", "wk", "wv", "wo", "wfc", "wproj")]
groups = [([Q[k] for k in Q if k == "embed" or k.startswith("value_embed")], 0.6), ([Q["head"]], 0.008),
          ([Q[k] for k in Q if k.endswith("lambda") or k == "skip"], 0.04)]
adam = torch.optim.Adam([{"params": ps, "lr": lr, "base_lr": lr} for ps, lr in groups], betas=(0.8, 0.95), eps=1e-8)
bufs = {k: torch.zeros_like(Q[k]) for k in matrices}
step_losses = []
for step in range(3):
    adam.zero_grad()
    for k in matrices:
        Q[k].grad = None
    l, _ = model_loss(Q)
    l.backward()
    step_losses.append(l.item())
    for grp in adam.param_groups:
        grp["lr"] = grp["base_lr"] * lr_mult(step)
    adam.step()
    mom = momentum(step)
    with torch.no_grad():
        for k in matrices:
            g = Q[k].grad
            bufs[k].mul_(mom).add_((1 - mom) * g)
            u = (1 - mom) * g + mom * bufs[k]
            weight = Q[k].T  # nn.Linear's [out][in] layout, in which the record states its scale
            scale = max(1.0, weight.size(0) / weight.size(1)) ** 0.5
            Q[k] -= 0.05 * lr_mult(step) * scale * newton_schulz(u)
check("losses of the three steps", max(abs(a - b) for a, b in zip(step_losses, m["step_losses"])) < 1e-12,
      f"{step_losses} vs {m['step_losses']}")
worst3 = 0.0
for t in m["tensors"]:
    got = Q[t["name"]].detach().numpy().ravel()
    want = after3_ref[t["offset"]:t["offset"] + t["rows"] * t["cols"]]
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    worst3 = max(worst3, err)
    check(f"after 3 steps: {t['name']} ({err:.1e})", err < 1e-9)
print(f"torch {torch.__version__}: after three optimiser steps, worst parameter error {worst3:.2e}")
print(f"torch {torch.__version__}: loss {loss.item():.12f}, worst gradient error {worst:.2e} (relative to each tensor's max)")
finish("torch-model")
