#!/usr/bin/env python3
"""Stands in for train_gpt in the runner's tests: writes a record-format log and its JSON lines
(a run id, the configuration, every step and validation) whose losses depend on --seed and,
unless --causal 1, on --window-mask; like train_gpt it refuses --causal 0 (exit 2) without
--allow-target-leak and records leaks_targets in the configuration. Exits 3 without finishing
when the environment names its seed in FAKE_FAIL_SEED. FAKE_DIVERGE=SEED:STEP:nan|inf|-inf makes that seed's loss at
STEP (a validation's at a step of 10, 20, ...) diverge: logged as train_gpt logs it,
diverged(nan), in both files, and the run stops there with exit 1, as train_gpt does. FAKE_COMMIT and FAKE_VAL_TOKENS stand for a rebuilt trainer or a changed
default: they change what the configuration records, not the flags."""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, required=True)
ap.add_argument("--log-file", required=True)
ap.add_argument("--window-mask", default="uni")
ap.add_argument("--causal", type=int, default=1)
ap.add_argument("--allow-target-leak", action="store_true")
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--preset", default="default")
ap.add_argument("--val-every", type=int, default=10)
ap.add_argument("--val-data", default="data/gcide/gcide_val_*.bin")
ap.add_argument("--train-data", default="data/gcide/gcide_train_*.bin")
ap.add_argument("--val-tokens", type=int, default=int(os.environ.get("FAKE_VAL_TOKENS", "65536")))
a, _ = ap.parse_known_args()
if not a.causal and not a.allow_target_leak:  # as train_gpt refuses a mask that shows the loss its targets
    print("train_gpt: --causal 0: the attention lets position t see position t + 1, whose token is the target it is scored on; "
          "give --allow-target-leak to run such a mask on purpose", file=sys.stderr)
    sys.exit(2)
div_seed, div_step, div_value = (os.environ.get("FAKE_DIVERGE", "") + "::").split(":")[:3]
diverge_at = int(div_step) if div_seed == str(a.seed) else -1


def loss_at(s, value):
    """The loss of step s: value, or the diverged one at FAKE_DIVERGE's step (text, JSON value)."""
    if s == diverge_at:
        return f"diverged({div_value})", f"diverged({div_value})"
    return f"{value:.4f}", value


shift = 0.0 if a.causal else (0.01 if a.window_mask == "bi" else 0.0)
run_id = os.urandom(8).hex()
with open(a.log_file, "w") as f, open(os.path.splitext(a.log_file)[0] + ".jsonl", "w") as j:
    f.write(f"run_id:{run_id} train_gpt fake\n")
    j.write(json.dumps({"event": "config", "run_id": run_id, "steps": a.steps, "window_mask": a.window_mask, "causal": a.causal,
                        "preset": a.preset, "val_every": a.val_every, "val_data": a.val_data, "train_data": a.train_data, "val_tokens": a.val_tokens, "seed": a.seed,
                        "world_size": int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")), "leaks_targets": "no" if a.causal else "yes",
                        "git_commit": os.environ.get("FAKE_COMMIT", "abc1234")}) + "\n")
    t = 0
    for s in range(a.steps + 1):
        if s % a.val_every == 0 or s == a.steps:
            v = 5.0 / (1 + s) + 0.001 * a.seed + shift
            text, value = loss_at(s, v)
            f.write(f"step:{s}/{a.steps} val_loss:{text} train_time:{t}ms step_avg:{t / max(s, 1):.2f}ms\n")
            j.write(json.dumps({"event": "val", "step": s, "total_steps": a.steps, "train_time_ms": t, "val_loss": value}) + "\n")
            if s == diverge_at:
                sys.exit(1)
        if s == a.steps:
            break
        if os.environ.get("FAKE_FAIL_SEED") == str(a.seed) and s == 5:
            sys.exit(3)
        t += 100 + (a.seed % 7) + (5 if a.window_mask == "bi" else 0)
        loss = 6.0 / (2 + s) + 0.001 * a.seed + shift
        text, value = loss_at(s + 1, loss)
        f.write(f"step:{s + 1}/{a.steps} train_loss:{text} train_time:{t}ms step_avg:{t / (s + 1):.2f}ms\n")
        j.write(json.dumps({"event": "step", "step": s + 1, "total_steps": a.steps, "train_time_ms": t, "train_loss": value}) + "\n")
        if s + 1 == diverge_at:
            sys.exit(1)
