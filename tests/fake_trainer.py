#!/usr/bin/env python3
"""Stands in for train_gpt in the runner's tests: writes a record-format log (and a JSON-lines
file) whose losses depend on --seed and, unless --causal 1, on --window-mask. Exits 3 without
finishing when the environment names its seed in FAKE_FAIL_SEED."""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, required=True)
ap.add_argument("--log-file", required=True)
ap.add_argument("--window-mask", default="uni")
ap.add_argument("--causal", type=int, default=1)
ap.add_argument("--steps", type=int, default=20)
a, _ = ap.parse_known_args()
shift = 0.0 if a.causal else (0.01 if a.window_mask == "bi" else 0.0)
with open(a.log_file, "w") as f, open(os.path.splitext(a.log_file)[0] + ".jsonl", "w") as j:
    j.write(json.dumps({"event": "config", "seed": a.seed, "window_mask": a.window_mask, "causal": a.causal}) + "\n")
    t = 0
    for s in range(a.steps + 1):
        if s % 10 == 0:
            v = 5.0 / (1 + s) + 0.001 * a.seed + shift
            f.write(f"step:{s}/{a.steps} val_loss:{v:.4f} train_time:{t}ms step_avg:{t / max(s, 1):.2f}ms\n")
            j.write(json.dumps({"event": "val", "step": s, "val_loss": v}) + "\n")
        if s == a.steps:
            break
        if os.environ.get("FAKE_FAIL_SEED") == str(a.seed) and s == 5:
            sys.exit(3)
        t += 100 + (a.seed % 7) + (5 if a.window_mask == "bi" else 0)
        f.write(f"step:{s + 1}/{a.steps} train_time:{t}ms step_avg:{t / (s + 1):.2f}ms\n")
