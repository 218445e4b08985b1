"""Record kind test_gpu: logs/SUITE.txt and logs/SUITE.rc: each make test-gpu suite's output and exit
code; logs/gpu.txt (nvidia-smi's name of the card) and logs/commit.txt. Figures: each suite's exit
code and its checks passed and failed (the sum of its 'NAME: N passed, M failed' lines), the GEMM
stress test's cases and repetitions.
"""
import glob
import os
import re

from tool_errors import ToolError
from record_kinds.common import known_commit, number, read_text

KIND = "test_gpu"


RESULT_LINE = re.compile(r"^([A-Za-z0-9_.-]+): (\d+) passed, (\d+) failed$")


def compute(rec, meta):
    d = os.path.join(rec, "logs")
    commit = known_commit(read_text(os.path.join(d, "commit.txt"), "commit file").strip(), f"{d}/commit.txt", os.path.join(d, "commit.txt"))
    gpu = read_text(os.path.join(d, "gpu.txt"), "card file").strip()
    card = gpu.splitlines()[0].split(",")[0].strip() if gpu else ""
    if not re.fullmatch(r"[ -~]+", card):
        raise ToolError(f"{d}/gpu.txt: {card[:40]!r} is not a card's name (nvidia-smi's name, then its driver)")
    for txt in sorted(glob.glob(os.path.join(d, "*.txt"))):  # every suite's log has its exit code
        name = os.path.basename(txt)[:-4]
        if name not in ("commit", "gpu", "build") and not os.path.exists(os.path.join(d, name + ".rc")):
            raise ToolError(f"{txt}: a suite's log without its exit code ({name}.rc)")
    suites = {}
    for rc_path in sorted(glob.glob(os.path.join(d, "*.rc"))):
        name = os.path.basename(rc_path)[:-3]
        rc_text = read_text(rc_path, "exit code file").strip()
        if not re.fullmatch(r"-?\d+", rc_text):
            raise ToolError(f"{rc_path}: not an exit code: {rc_text[:40]!r}")
        text = read_text(os.path.join(d, name + ".txt"))
        passed = failed = 0
        for line in text.splitlines():
            m = RESULT_LINE.match(line.strip())
            if m:
                passed, failed = passed + int(m.group(2)), failed + int(m.group(3))
        s = {"rc": int(rc_text), "passed": passed, "failed": failed}
        st = re.search(r"^gemm_stress: (\d+) cases, (\d+) repetitions, (\d+) failed, (\S+) s$", text, re.M)
        if st:
            s.update(stress_cases=int(st.group(1)), stress_repetitions=int(st.group(2)),
                     stress_seconds=number(st.group(4), f"{d}/{name}.txt", "the stress test's seconds"))
            if int(st.group(3)):  # (a passing record names no failures)
                s["stress_failed"] = int(st.group(3))
        suites[name] = s
    if not suites:
        raise ToolError(f"{d}: no SUITE.rc file")
    return {"kind": "test_gpu", "commit": commit, "card": card, "suites": suites,
            "all_passed": all(s["rc"] == 0 and s["failed"] == 0 and not s.get("stress_failed") for s in suites.values())}


def table(rec_name, fig):
    """The markdown table a page quotes for a record."""
    rows = [f"Record `results/records/{rec_name}` ({fig['card']}, commit {fig['commit']}):", "", "| figure | value |", "| --- | --- |"]
    for name, s in fig["suites"].items():
        extra = f"; {s['stress_cases']} cases, {s['stress_repetitions']} repetitions" if "stress_cases" in s else ""
        rows.append(f"| {name} | exit {s['rc']}, {s['passed']} passed, {s['failed']} failed{extra} |")
    return "\n".join(rows) + "\n"
