"""bench/bwd_schedule_model.py, the model of the fused backward's grid behind the rising last head
(attention/tile_scheduler.cuh): the figures the kernel's comment quotes, the model's own contract
(a block only waits for shares of blocks started before it: else the model fails on a share not
yet computed), and bad flags refused."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bwd_schedule_model as m  # noqa: E402

# T = 16384, 16 heads on 132 SMs: the figures of tile_scheduler.cuh (7.4% and 1.2%)
dec, ris = m.simulate(128, 16, False), m.simulate(128, 16, True)
check("decreasing order, T 16384 x 16 heads", abs(dec - 0.0737) < 0.001, f"{dec:.4f}")
check("rising last head, T 16384 x 16 heads", abs(ris - 0.0120) < 0.001, f"{ris:.4f}")
# the rising last head helps on every head-by-head shape the benchmarks run, with noise too
for n_kb, heads in ((128, 6), (256, 8), (512, 6), (64, 16)):
    for noise, delay in ((0.0, 1.0), (0.2, 1.5)):
        d, r = m.simulate(n_kb, heads, False, noise=noise, delay=delay), m.simulate(n_kb, heads, True, noise=noise, delay=delay)
        check(f"rising last head no worse: {n_kb} key blocks x {heads} heads, noise {noise}", r <= d + 1e-9, f"{r:.4f} > {d:.4f}")
# one head: the order is the decreasing one (no head before it to spread its blocks' starts)
check("one head: the same order", m.simulate(128, 1, False) == m.simulate(128, 1, True))
# the command line: a result line, and bad flags refused with the flag named
script = os.path.join(ROOT, "bench", "bwd_schedule_model.py")
r = subprocess.run([sys.executable, script, "--T", "4096", "--heads", "4"], capture_output=True, text=True)
check("runs", r.returncode == 0 and "rising last head" in r.stdout, r.stdout + r.stderr)
for args, flag in ((["--T", "100"], "--T"), (["--heads", "0"], "--heads"), (["--noise", "2"], "--noise"), (["--T", "x"], "--T")):
    r = subprocess.run([sys.executable, script] + args, capture_output=True, text=True)
    check(f"refuses {' '.join(args)}", r.returncode in (1, 2) and flag in r.stderr and "Traceback" not in r.stderr, r.stderr)
finish("schedule-model")
