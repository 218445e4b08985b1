#!/usr/bin/env python3
"""Whether a complete run's log is the run a resumed script asks for: its configuration (the JSON
lines beside it) records this seed, this trainer and every flag's value (--preset among them). A
script that keeps complete logs and reruns the rest (ablations/learning_compare.sh) calls it on
each log it would keep, so that a resume with another seed, trainer, preset or other flags refuses
instead of keeping the old logs as the new runs.

    python3 scripts/resume_check.py LOG SEED TRAINER [--flag value ...]

TRAINER is train_gpt or torch_peer (peer/torch_peer.py records it as "trainer"; train_gpt records
none). Exit 0: the log's run is that one. Exit 1: it is not, or its configuration is not recorded
(one line naming the log and the setting, with the value recorded and the value asked). Exit 2: a
malformed argument, named (SEED and integer settings are ASCII decimal numbers; a flag given twice).
"""
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speedrun_logs  # noqa: E402
from tool_errors import ToolError, run  # noqa: E402

MAX_SEED = 2 ** 64 - 1  # train_gpt's --seed is a 64-bit unsigned integer
TRAINERS = ("train_gpt", "torch_peer")
USAGE = "usage: resume_check.py LOG SEED TRAINER [--flag value ...] (SEED a whole number from 0 to 2^64 - 1; TRAINER " + \
        " or ".join(TRAINERS) + ")"


def usage(why):
    print(f"resume_check: {why}\n{USAGE}", file=sys.stderr)
    return 2


def bad_value(flag, recorded, given):
    """Why the text given for a flag cannot be a value of the recorded one's type, or None."""
    if given is True:
        return None if isinstance(recorded, bool) else f"{flag} needs a value"
    if isinstance(recorded, bool):
        return None
    if isinstance(recorded, int):
        return None if re.fullmatch(r"-?[0-9]{1,20}", given) else f"{flag} {given!r}: want a whole number (ASCII digits)"
    if isinstance(recorded, float):
        ok = re.fullmatch(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", given) and math.isfinite(float(given))
        return None if ok else f"{flag} {given!r}: want a decimal number"
    return None


def main(argv):
    if len(argv) < 3:
        return usage("want LOG, SEED and TRAINER")
    if not re.fullmatch(r"[0-9]{1,20}", argv[1]) or int(argv[1]) > MAX_SEED:
        return usage(f"SEED {argv[1]!r}: want a whole number from 0 to 2^64 - 1 (ASCII digits)")
    if argv[2] not in TRAINERS:
        return usage(f"TRAINER {argv[2]!r}: want " + " or ".join(TRAINERS))
    log, seed, trainer, flags = argv[0], int(argv[1]), argv[2], argv[3:]
    i, given = 0, set()
    while i < len(flags):  # every token a flag or the value after one
        if not re.fullmatch(r"--[A-Za-z0-9][A-Za-z0-9_-]*(=.*)?", flags[i], re.S):  # a name after the dashes
            return usage(f"{flags[i]!r}: want --flag value or --flag=value")
        name = flags[i].partition("=")[0]
        if name in given:  # train_gpt refuses a flag given twice: no log is the run of such a command
            return usage(f"{name} given twice: give each flag once (train_gpt refuses a second)")
        given.add(name)
        i += 1 if "=" in flags[i] or i + 1 == len(flags) or flags[i + 1].startswith("--") else 2
    r = speedrun_logs.parse(log)
    redo = ": move it out of the folder to run it anew, or ask for the run it holds"
    if not r.config:
        raise ToolError(f"{log}: no configuration beside it (JSON lines): it cannot be told to be the run asked for{redo}")
    settings = speedrun_logs.flag_settings(flags)
    for k, v in settings.items():  # a malformed flag is named before the log is compared
        why = bad_value(f"--{k.replace('_', '-')}", r.config[k], v) if k in r.config else None
        if why:
            return usage(why)
    made_by = r.config.get("trainer", "train_gpt")
    if made_by != trainer:
        raise ToolError(f"{log}: a run of {made_by!r}, where {trainer} is asked for{redo}")
    if r.seed != seed:
        raise ToolError(f"{log}: a run of seed {r.config.get('seed')!r}, where seed {seed} is asked for{redo}")
    for k, v in settings.items():
        if k in speedrun_logs.PER_RUN:
            continue
        if k not in r.config:
            asked = f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
            raise ToolError(f"{log}: its configuration records no {k}, where {asked} is asked for{redo}")
        if not speedrun_logs.same_value(r.config[k], v):
            raise ToolError(f"{log}: its configuration has {k} {r.config[k]!r}, where --{k.replace('_', '-')} {v} is asked "
                            f"for{redo}")
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "resume_check")
