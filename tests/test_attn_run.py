"""build/attn_run on .npy files against a numpy fp64 reference written here from docs/masks.md
(GPU machine; numpy only). Tolerance: relative Frobenius error 2e-2 (bf16 inputs and outputs).

    python3 tests/test_attn_run.py build/attn_run
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require; require("numpy", suite="attn-run")  # noqa: E402,E702
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

exe = sys.argv[1]
rng = np.random.default_rng(5)


def bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return u.view(np.float32)


def reference(q, k, v, g, keep):
    T, H, D = q.shape
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(D)
    s = np.where(keep[None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    lse = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    p = p / p.sum(-1, keepdims=True)
    o = np.einsum("hqk,khd->qhd", p, v)
    dp = np.einsum("qhd,khd->hqk", g, v)
    ds = p * (dp - np.einsum("qhd,qhd->hq", g, o)[..., None])
    dq = np.einsum("hqk,khd->qhd", ds, k) / np.sqrt(D)
    dk = np.einsum("hqk,qhd->khd", ds, q) / np.sqrt(D)
    dv = np.einsum("hqk,qhd->khd", p, g)
    return o, lse, dq, dk, dv


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


T, H, D = 333, 2, 64
for causal, window, mode, gran, docs, prefix in [(1, 0, "uni", "token", False, 0), (1, 50, "uni", "token", True, 0),
                                                 (0, 40, "bi", "token", False, 0), (1, 2, "bi", "block", True, 0),
                                                 (1, 0, "uni", "token", True, 7), (1, 30, "bi", "token", True, 12),
                                                 (1, 0, "uni", "token", False, 100)]:
    q, k, v, g = (bf16(rng.standard_normal((T, H, D))).astype(np.float64) for _ in range(4))
    tokens = rng.integers(0, 50257, T).astype(np.int32)
    tokens[rng.random(T) < 0.02] = 50256
    doc = np.cumsum(tokens == 50256)
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    keep = np.ones((T, T), bool)
    # the first position of each query's document (position 0 without documents)
    start = np.array([np.argmax(doc == doc[i]) for i in range(T)]) if docs else np.zeros(T, int)
    if causal:
        keep &= (ki <= qi) | (ki - start[:, None] < prefix)
    if window:
        a, b = (qi // 128, ki // 128) if gran == "block" else (qi, ki)
        keep &= (np.abs(a - b) if mode == "bi" else a - b) < window
    if docs:
        keep &= doc[:, None] == doc[None, :]
    with tempfile.TemporaryDirectory() as d:
        for name, x in (("q", q), ("k", k), ("v", v), ("g", g)):
            np.save(os.path.join(d, name + ".npy"), x.astype(np.float32))
        cmd = [exe, "--q", f"{d}/q.npy", "--k", f"{d}/k.npy", "--v", f"{d}/v.npy", "--dout", f"{d}/g.npy", "--causal",
               str(causal), "--window", str(window), "--window-mask", mode, "--window-granularity", gran, "--prefix",
               str(prefix), "--out", d]
        if docs:
            np.save(os.path.join(d, "tok.npy"), tokens)
            cmd += ["--tokens", f"{d}/tok.npy"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        name = f"causal={causal} window={window} {mode} {gran} docs={docs} prefix={prefix}"
        if not check(f"attn_run runs: {name}", r.returncode == 0, r.stderr):
            continue
        want = reference(q, k, v, g, keep)
        for label, w in zip(("o", "lse", "dq", "dk", "dv"), want):
            got = np.load(os.path.join(d, label + ".npy"))
            err = rel(got, w)
            check(f"{name}: {label} rel err {err:.2e} <= 2e-2", err <= 2e-2)
r = subprocess.run([exe, "--q", "/nonexistent.npy", "--k", "x", "--v", "y"], capture_output=True, text=True)
check("missing input file named", r.returncode == 1 and "/nonexistent.npy" in r.stderr, r.stderr)
finish("attn-run")
