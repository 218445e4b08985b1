#!/usr/bin/env python3
"""Whether a complete run's log is the run a resumed script asks for: its configuration (the JSON
lines beside it) records this seed and every flag's value. A script that keeps complete logs and
reruns the rest (ablations/learning_compare.sh) calls it on each log it would keep, so that a resume
with another seed or other flags refuses instead of keeping the old logs as the new runs.

    python3 scripts/resume_check.py LOG SEED [--flag value ...]

Exit 0: the log's run is that one. Exit 1: it is not, or its configuration is not recorded (one
line naming the log and the setting, with the value recorded and the value asked).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speedrun_logs  # noqa: E402
from tool_errors import ToolError, run  # noqa: E402

MAX_SEED = 2 ** 64 - 1  # train_gpt's --seed is a 64-bit unsigned integer


def main(argv):
    if len(argv) < 2 or not argv[1].isdigit() or len(argv[1]) > 20 or int(argv[1]) > MAX_SEED:
        print("usage: resume_check.py LOG SEED [--flag value ...] (SEED a whole number from 0 to 2^64 - 1)", file=sys.stderr)
        return 2
    log, seed, flags = argv[0], int(argv[1]), argv[2:]
    r = speedrun_logs.parse(log)
    redo = ": move it out of the folder to run it anew, or ask for the run it holds"
    if not r.config:
        raise ToolError(f"{log}: no configuration beside it (JSON lines): it cannot be told to be the run asked for{redo}")
    if r.seed != seed:
        raise ToolError(f"{log}: a run of seed {r.config.get('seed')!r}, where seed {seed} is asked for{redo}")
    for k, v in speedrun_logs.flag_settings(flags).items():
        if k in speedrun_logs.PER_RUN:
            continue
        if k not in r.config:
            raise ToolError(f"{log}: its configuration records no {k}, where --{k.replace('_', '-')} {v} is asked for{redo}")
        if not speedrun_logs.same_value(r.config[k], v):
            raise ToolError(f"{log}: its configuration has {k} {r.config[k]!r}, where --{k.replace('_', '-')} {v} is asked "
                            f"for{redo}")
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "resume_check")
