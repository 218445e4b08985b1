#!/usr/bin/env python3
"""Runs an ablation campaign: for each GPU count and each variant, N runs with distinct seeds
(run i uses seed SEED0 + i for every variant, so runs pair up across variants), launched through
mpirun when more than one GPU is asked for; the variants take turns (run 0 of each, then run 1
of each, ...), so a slow drift of the machine's speed does not fall on one variant. Logs are
named CAMPAIGN/VARIANT_gN_rI.txt; a run whose log already reaches its final validation is
skipped, so an interrupted campaign resumes where it stopped (a partial log is run again from
the start).

    python3 scripts/ab_run.py --campaign logs/mask --gpus 1,2 --runs 5 \\
        --variant uni='--window-mask uni' --variant bi='--window-mask bi' -- --preset default --steps 200

Each run is: [mpirun -np N] TRAINER COMMON... VARIANT_FLAGS... --seed S --log-file LOG
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speedrun_logs  # noqa: E402


def plan(args):
    runs = []
    for gpus in args.gpus:  # variants interleaved run by run, so that drifts in the machine hit them alike
        for i in range(args.runs):
            for name, flags in args.variant:
                log = os.path.join(args.campaign, f"{name}_g{gpus}_r{i}.txt")
                cmd = (["mpirun", "-np", str(gpus)] + shlex.split(args.mpirun_args) if gpus > 1 else [])
                cmd += shlex.split(args.trainer) + args.common + shlex.split(flags)
                cmd += ["--seed", str(args.seed0 + i), "--log-file", log]
                runs.append((name, gpus, i, log, cmd))
    return runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--campaign", required=True, help="directory for the logs")
    ap.add_argument("--gpus", default="1", help="comma-separated GPU counts (default 1)")
    ap.add_argument("--runs", type=int, default=5, help="runs per variant and GPU count (default 5)")
    ap.add_argument("--variant", action="append", required=True, help="NAME='FLAGS' (repeatable; the first is the baseline)")
    ap.add_argument("--seed0", type=int, default=1000)
    ap.add_argument("--trainer", default="./train_gpt")
    ap.add_argument("--mpirun-args", default="", help="extra mpirun arguments (host file, --bind-to ...)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and what would be skipped")
    ap.add_argument("common", nargs="*", help="flags for every run (after --)")
    args = ap.parse_args(argv)
    try:
        args.gpus = [int(g) for g in args.gpus.split(",")]
    except ValueError:
        ap.error(f"--gpus wants comma-separated integers, got {args.gpus!r}")
    if any(g < 1 for g in args.gpus) or args.runs < 1:
        ap.error("--gpus and --runs must be positive")
    variants = []
    for v in args.variant:
        name, sep, flags = v.partition("=")
        if not sep or not name or "/" in name or "_g" in name:
            ap.error(f"--variant wants NAME=FLAGS with a plain NAME (no '/' or '_g'), got {v!r}")
        variants.append((name, flags))
    if len({n for n, _ in variants}) != len(variants):
        ap.error("variant names must differ")
    args.variant = variants
    os.makedirs(args.campaign, exist_ok=True)
    manifest = {"variants": variants, "gpus": args.gpus, "runs": args.runs, "seed0": args.seed0, "common": args.common,
                "trainer": args.trainer}
    with open(os.path.join(args.campaign, "campaign.json"), "w") as f:  # the report reads the variant order here
        json.dump(manifest, f, indent=1)
    runs = plan(args)
    todo = []
    for r in runs:
        log = r[3]
        if os.path.exists(log) and speedrun_logs.parse(log).complete:
            print(f"skip (complete): {log}")
        else:
            todo.append(r)
    print(f"ab_run: {len(runs)} runs, {len(runs) - len(todo)} complete, {len(todo)} to run", flush=True)
    for k, (name, gpus, i, log, cmd) in enumerate(todo, 1):
        print(f"[{k}/{len(todo)}] {name} on {gpus} GPU(s), run {i}: {shlex.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        for stale in (log, os.path.splitext(log)[0] + ".jsonl"):
            if os.path.exists(stale):
                os.remove(stale)  # a partial log is started again
        t0 = time.time()
        rc = subprocess.call(cmd)
        finished = os.path.exists(log) and speedrun_logs.parse(log).complete
        if rc != 0 or not finished:
            print(f"ab_run: error: run {log} failed (exit code {rc}); fix it and run the same command again to resume",
                  file=sys.stderr)
            return 1
        print(f"    done in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
