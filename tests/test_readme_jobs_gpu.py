"""The README's jobs on the GPU (part of make test-gpu): the default job whole, as the README's
first command runs it, and the first 50 steps of every preset.

    python3 tests/test_readme_jobs_gpu.py TRAIN_PATTERN VAL_PATTERN [TRAINER]

  default job: `./train_gpt` with no flag at all when the shards are the default ones (the GCIDE
    shards of `make data`), all 300 steps; with --train-data / --val-data when they are not;
  every preset (tiny, default, speedrun): its first 50 steps (--steps 50) on the given shards.
    The speedrun preset's own shards are FineWeb's; on GCIDE its validation is cut to 524288
    tokens (8 of its 65536-token sequences), which the 1M-token validation shard holds.
  --preset speedrun against --recipe recipes/2024-12-10.toml: 4 steps each on the given shards,
    the same losses to the bit and the same configuration (tests/test_recipes.py checks the
    resolved recipes agree without a GPU).
Each run must exit 0, log every step, and end with a finite validation loss at its last step
(read from the JSON-lines log). The table at the end gives each job's step_avg (as its log's
last step line: training time over the steps after the first 10) and final validation loss.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, shard_args  # noqa: E402

SUITE = "readme-jobs-gpu"
TRAIN_PAT, VAL_PAT, TRAINER = shard_args("test_readme_jobs_gpu", SUITE)
# the trainer's own defaults (train/options.h): where the README's first command reads its shards
DEFAULT_TRAIN, DEFAULT_VAL = "data/gcide/gcide_train_*.bin", "data/gcide/gcide_val_*.bin"
TMP = tempfile.mkdtemp(prefix="readme_jobs_")
DATA = [] if (TRAIN_PAT, VAL_PAT) == (DEFAULT_TRAIN, DEFAULT_VAL) else ["--train-data", TRAIN_PAT, "--val-data", VAL_PAT]


def run(name, flags, steps, timeout=900):
    """Runs the trainer with flags (and a log file of its own); returns (exit code, output, JSON-lines events)."""
    log = os.path.join(TMP, name + ".txt")
    cmd = [TRAINER] + flags + ["--log-file", log]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = -1, f"timed out after {timeout} s\n" + (e.stdout or b"").decode(errors="replace")[-2000:]
    events = []
    jl = os.path.join(TMP, name + ".jsonl")
    if os.path.exists(jl):
        for line in open(jl):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    steps_logged = {e["step"] for e in events if e.get("event") in ("step", "val")}
    vals = {e["step"]: e.get("val_loss") for e in events if e.get("event") == "val"}
    last_val = vals.get(steps)
    finite = isinstance(last_val, (int, float)) and math.isfinite(last_val)
    check(f"{name}: exit 0", rc == 0, f"`{' '.join(cmd)}` exited {rc}:\n{out[-2000:]}")
    check(f"{name}: every step logged", all(s in steps_logged for s in range(1, steps + 1)),
          f"{len(steps_logged)} of {steps} steps logged")
    check(f"{name}: a finite validation loss at step {steps}", finite, f"validation losses logged: {vals}")
    # the log's step_avg at the last step: training time over the steps after the first 10
    times = [e["train_time_ms"] for e in events if e.get("event") in ("step", "val") and e.get("step") == steps]
    avg = times[-1] / (steps - 10) if times and isinstance(times[-1], (int, float)) else float("nan")
    print(f"  {name}: exit {rc} in {time.time() - t0:.1f} s, {len(steps_logged)} steps, val {last_val}", flush=True)
    return name, " ".join(flags) or "(no flag)", avg, last_val


rows = [run("default_job", DATA, 300)]
for preset in ("tiny", "default", "speedrun"):
    extra = ["--val-tokens", "524288"] if preset == "speedrun" and DATA else []
    if preset == "speedrun" and not DATA:  # its own shards are FineWeb's: the given ones instead
        extra = ["--train-data", TRAIN_PAT, "--val-data", VAL_PAT, "--val-tokens", "524288"]
    rows.append(run(f"preset_{preset}_50", ["--preset", preset, "--steps", "50"] + DATA + extra, 50))

# --preset speedrun and --recipe recipes/2024-12-10.toml are one run: 4 steps of each (validation
# of one 65536-token sequence at steps 0 and 4) give the same losses, to the bit, and the same
# configuration but for the entries that name the recipe's source
SPEEDRUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "2024-12-10.toml")
SHORT = ["--steps", "4", "--val-every", "4", "--val-tokens", "65536", "--train-data", TRAIN_PAT, "--val-data", VAL_PAT]


def losses_and_config(name):
    """Of a run above: [(event, step, loss)] of its step and validation lines, and its configuration
    without the entries that name its recipe's source, its run and its log."""
    jl = os.path.join(TMP, name + ".jsonl")
    events = [json.loads(line) for line in open(jl)] if os.path.exists(jl) else []
    lines = [(e["event"], e["step"], e.get("val_loss", e.get("train_loss"))) for e in events if e.get("event") in ("step", "val")]
    config = next((e for e in events if e.get("event") == "config"), {})
    return lines, {k: v for k, v in config.items() if k not in ("preset", "recipe", "run_id", "log_file")}


run("speedrun_preset_4", ["--preset", "speedrun"] + SHORT, 4)
run("speedrun_recipe_4", ["--recipe", SPEEDRUN] + SHORT, 4)
(a, config_a), (b, config_b) = losses_and_config("speedrun_preset_4"), losses_and_config("speedrun_recipe_4")
finite = all(isinstance(x, float) and math.isfinite(x) for _, _, x in a)
check("--preset speedrun and --recipe recipes/2024-12-10.toml: the same losses to the bit (5 lines or more, finite)",
      len(a) >= 5 and finite and a == b, f"{a}\n{b}")
check("--preset speedrun and --recipe recipes/2024-12-10.toml: the same configuration", config_a and config_a == config_b,
      f"{config_a}\n{config_b}")

print(f"{'job':<22} {'step_avg ms':>15} {'final val loss':>15}  flags")
for name, flags, ms, val in rows:
    print(f"{name:<22} {ms:>15.2f} {val if val is not None else float('nan'):>15.4f}  {flags}")
finish(SUITE)
