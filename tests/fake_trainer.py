#!/usr/bin/env python3
"""Stands in for train_gpt in the runner's tests: writes a record-format log and its JSON lines
(a run id, the configuration, every step and validation) whose losses depend on --seed and,
unless --causal 1, on --window-mask; like train_gpt it refuses --causal 0 (exit 2) without
--allow-target-leak and records leaks_targets in the configuration. Exits 3 without finishing
when the environment names its seed in FAKE_FAIL_SEED. FAKE_DIVERGE=SEED:STEP:nan|inf|-inf makes that seed's loss at
STEP (a validation's at a step of 10, 20, ...) diverge: logged as train_gpt logs it,
diverged(nan), in both files, and the run stops there with exit 1, as train_gpt does. FAKE_COMMIT and FAKE_VAL_TOKENS stand for a rebuilt trainer or a changed
default: they change what the configuration records, not the flags.

Recipes as train_gpt takes them, for the removal campaigns' tests: --print-schema prints the
schema of the keys below (SCHEMA: train_gpt's form and neutral values), --recipe FILE reads a
recipe of those keys (a missing file, an unknown key, a value of another type or out of range
exits 2 naming it), flags override it, --print-recipe prints the resolved recipe as TOML, and
the configuration records every key under its log name, with "recipe". The final loss adds
mechanism(keys) and the seed's jitter(seed, keys), and a step's time adds step_extra(seed,
keys), each less its value at the defaults: tests/test_removals.py computes the expected deltas
from these formulas."""
import argparse
import json
import os
import sys
import tomllib

from fake_mechanisms import jitter, mechanism, step_extra

# key: (type, (lo, hi) or choices, flag, log name, defines_run, neutral, default)
SCHEMA = {
    "data.train": ("string", None, "--train-data", "train_data", False, None, "data/gcide/gcide_train_*.bin"),
    "data.val": ("string", None, "--val-data", "val_data", False, None, "data/gcide/gcide_val_*.bin"),
    "model.layers": ("integer", (2, 256), None, "layers", True, None, 4),
    "attention.causal": ("integer", (0, 1), "--causal", "causal", True, None, 1),
    "attention.doc_mask": ("integer", (0, 1), "--doc-mask", "doc_mask", True, 0, 1),
    "attention.window_mask": ("string", ("uni", "bi"), "--window-mask", "window_mask", True, None, "uni"),
    "attention.prefix_tokens": ("integer", (0, 1 << 20), "--prefix-tokens", "prefix_tokens", True, 0, 0),
    "run.steps": ("integer", (1, 1000000), "--steps", "steps", True, None, 20),
    "optimizer.muon.momentum_start": ("number", (0.0, 1.0), None, "muon_momentum_start", True,
                                      {"same_as": "optimizer.muon.momentum_end"}, 0.85),
    "optimizer.muon.momentum_end": ("number", (0.0, 1.0), None, "muon_momentum_end", True, None, 0.95),
    "schedule.lr_cooldown": ("integer", (1, 1000000), None, "lr_cooldown_steps", True, 1, 600),
    "schedule.window_start": ("integer", (64, 1 << 20), None, "window_start", True, {"same_as": "schedule.window_end"}, 64),
    "schedule.window_end": ("integer", (64, 1 << 20), None, "window_end", True, None, 1792),
    "validation.every": ("integer", (1, 1000000), "--val-every", "val_every", False, None, 10),
}


def refuse(text):
    print(f"train_gpt: {text}", file=sys.stderr)
    sys.exit(2)


def load_recipe(path, values):
    """Sets values from a recipe file of SCHEMA's keys, refused as train_gpt's loader refuses them."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        refuse(f"--recipe: {path}: cannot read it: {e.strerror}")
    except tomllib.TOMLDecodeError as e:
        refuse(f"{path}: not a TOML file: {e}")

    def walk(t, prefix):
        for k, v in t.items():
            key = prefix + k
            if isinstance(v, dict):
                walk(v, key + ".")
                continue
            if key not in SCHEMA:
                refuse(f"{path}: unknown key {key}")
            kind, rng = SCHEMA[key][:2]
            ok = {"integer": isinstance(v, int) and not isinstance(v, bool),
                  "number": isinstance(v, (int, float)) and not isinstance(v, bool),
                  "string": isinstance(v, str)}[kind]
            if not ok or (rng and kind != "string" and not rng[0] <= v <= rng[1]) or (rng and kind == "string" and v not in rng):
                refuse(f"{path}: {key}: {v!r} is not a value of it ({kind} {rng})")
            values[key] = float(v) if kind == "number" else v
    walk(doc, "")

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int)
ap.add_argument("--log-file")
ap.add_argument("--allow-target-leak", action="store_true")
ap.add_argument("--preset", default="default")
ap.add_argument("--recipe", default="")
ap.add_argument("--print-schema", action="store_true")
ap.add_argument("--print-recipe", action="store_true")
ap.add_argument("--val-tokens", type=int, default=int(os.environ.get("FAKE_VAL_TOKENS", "65536")))
for key, (kind, _, flag, *_rest) in SCHEMA.items():
    if flag:
        ap.add_argument(flag, dest=key, type=int if kind == "integer" else str, default=None)
a, _ = ap.parse_known_args()
if a.print_schema:
    print(json.dumps([{"key": k, "type": t, "range": f"{r[0]} to {r[1]}" if r and t != "string" else ", ".join(r or ["any"]),
                       "flag": f, "log": log, "defines_run": d, "neutral": n,
                       "off": None if n is None else f"{k}'s mechanism"} for k, (t, r, f, log, d, n, _) in SCHEMA.items()]))
    sys.exit(0)
values = {k: e[6] for k, e in SCHEMA.items()}
if a.recipe:
    load_recipe(a.recipe, values)
for key, e in SCHEMA.items():
    if e[2] and getattr(a, key) is not None:
        values[key] = getattr(a, key)
if values["model.layers"] % 2:
    refuse("--layers: must be even (the U-net pairs layer i with layer L-1-i)")
if a.print_recipe:
    tables = {}
    for key, v in values.items():
        t, k = key.rsplit(".", 1)
        tables.setdefault(t, []).append(f"{k} = {json.dumps(v)}")  # (JSON's numbers and strings are TOML's here)
    print("# The resolved recipe (fake)\n" + "\n".join(f"\n[{t}]\n" + "\n".join(rows) for t, rows in tables.items()))
    sys.exit(0)
if a.seed is None or a.log_file is None:
    refuse("--seed and --log-file are required")
a.window_mask, a.causal, a.steps = values["attention.window_mask"], values["attention.causal"], values["run.steps"]
a.val_every, a.val_data, a.train_data = values["validation.every"], values["data.val"], values["data.train"]


# none at the defaults: the runs of the other tests keep their losses and times
defaults = {k: e[6] for k, e in SCHEMA.items()}
extra_loss = mechanism(values) + jitter(a.seed, values) - mechanism(defaults) - jitter(a.seed, defaults)
extra_time = step_extra(a.seed, values) - step_extra(a.seed, defaults)
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
    config = {"event": "config", "run_id": run_id, "preset": "" if a.recipe else a.preset, "recipe": a.recipe}
    config.update({SCHEMA[k][3]: v for k, v in values.items()})
    config.update({"val_tokens": a.val_tokens, "seed": a.seed, "world_size": int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")),
                   "leaks_targets": "no" if a.causal else "yes", "git_commit": os.environ.get("FAKE_COMMIT", "abc1234")})
    j.write(json.dumps(config) + "\n")
    t = 0
    for s in range(a.steps + 1):
        if s % a.val_every == 0 or s == a.steps:
            v = 5.0 / (1 + s) + 0.001 * a.seed + shift + extra_loss
            text, value = loss_at(s, v)
            f.write(f"step:{s}/{a.steps} val_loss:{text} train_time:{t}ms step_avg:{t / max(s, 1):.2f}ms\n")
            j.write(json.dumps({"event": "val", "step": s, "total_steps": a.steps, "train_time_ms": t, "val_loss": value}) + "\n")
            if s == diverge_at:
                sys.exit(1)
        if s == a.steps:
            break
        if os.environ.get("FAKE_FAIL_SEED") == str(a.seed) and s == 5:
            sys.exit(3)
        t += 100 + (a.seed % 7) + (5 if a.window_mask == "bi" else 0) + extra_time
        loss = 6.0 / (2 + s) + 0.001 * a.seed + shift + extra_loss
        text, value = loss_at(s + 1, loss)
        f.write(f"step:{s + 1}/{a.steps} train_loss:{text} train_time:{t}ms step_avg:{t / (s + 1):.2f}ms\n")
        j.write(json.dumps({"event": "step", "step": s + 1, "total_steps": a.steps, "train_time_ms": t, "train_loss": value}) + "\n")
        if s + 1 == diverge_at:
            sys.exit(1)
