"""Records of kind compare_flex (scripts/record_kinds/compare_flex.py): a log of five rows copied
from results/records/2026-11-25_compare_flex_h200's (two with a window or documents at head dim
128 and one at 64, the two dense causal ones) and six of its backward's rows gives the speed
ranges, cuDNN's range, the backward's savings and the goals worked out by hand below; --check
fails on a log edited by one digit and on a figure edited by hand; a hostile log (a line missing,
a figure that is no number, nan, a speed that does not follow from its times, a dirty or empty
commit, two commits, a dense causal row without cuDNN's times, a mask of no known group, a
backward row of no known choice) is refused with its file named.

    python3 tests/test_record_compare_flex.py
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, edit, finish, run_tool  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = [sys.executable, os.path.join(ROOT, "scripts", "record_figures.py")]
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import record_figures  # noqa: E402

NAME = "2026-11-25_compare_flex_t"
LOG_NAME = "2026-11-25_compare_flex_h200_e856b09.md"
HEAD = ("# One H200, 2026-11-25, commit {commit}: build/bench/bench_attention FLAGS --name NAME for each row, then "
        "python3 bench/compare_flex.py ALL.json, back to back\n")
LOG = """Device: NVIDIA H200; PyTorch 2.11.0+cu130; bf16; times in ms (median of 20); our useful TFLOP/s count kept pairs only.

| T, heads, head dim | mask | ours fwd | flex fwd | speed fwd | ours fwd+bwd | flex fwd+bwd | speed fwd+bwd | ours TF/s fwd, fwd+bwd | cuDNN fwd | cuDNN fwd+bwd | flex block mask build |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| 65536, 6, 128 | speedrun: causal + 8 blocks + docs | 0.317 | 0.770 | 2.43x | 1.262 | 2.032 | 1.61x | 330.0, 289.5 | - | - | 6.20 |
| 65536, 6, 128 | causal + 1024 uni | 0.452 | 0.791 | 1.75x | 1.859 | 2.660 | 1.43x | 452.5, 385.1 | - | - | 5.98 |
| 16384, 16, 128 | dense causal | 1.704 | 2.991 | 1.76x | 7.763 | 9.937 | 1.28x | 645.4, 495.7 | 1.736 (1.02x) | 7.002 (0.90x) | 3.06 |
| 65536, 12, 64 | causal + 1024 uni | 0.610 | 0.801 | 1.31x | 2.387 | 3.340 | 1.40x | 335.1, 299.9 | - | - | 7.54 |
| 16384, 16, 64 | dense causal | 1.303 | 1.856 | 1.42x | 4.872 | 6.664 | 1.37x | 422.0, 395.0 | 1.243 (0.95x) | 4.416 (0.91x) | 4.20 |

Speed columns: other time / our time (above 1: ours is faster). cuDNN columns: its time and our speed relative to it. Block mask build: create_block_mask (compiled), median of 5 calls after the first, not in the flex times.

Backward choices in the same call (ATTN_BWD=fused|two-kernels, ATTN_BWD_OWN=128|64; fwd ms, fwd TF/s, fwd+bwd ms, fwd+bwd TF/s, density):
```
fused - d64dense                                          1.293     425.1        5.419     355.1  0.50003
two-kernels 128 d64dense                                          1.298     423.4        4.833     398.2  0.50003
two-kernels 64 d64dense                                          1.303     421.8        4.908     392.1  0.50003
fused - d64uni1024                                        0.613     333.9        2.676     267.5  0.01550
two-kernels 64 d64uni1024                                        0.613     333.6        2.254     317.6  0.01550
fused - d128dense                                         1.716     640.9        7.695     500.1  0.50003
two-kernels 128 d128dense                                         1.730     635.7        8.215     468.5  0.50003
```
"""
GOALS = {"flex_fwd": {"128": 1.3, "64": 1.2}, "flex_fwdbwd": {"128": 1.3, "64": 1.2}, "cudnn": 0.9}


def make(tmp, commit="e856b09", log=None, meta=None):
    rec = os.path.join(tmp, NAME)
    shutil.rmtree(rec, ignore_errors=True)
    os.makedirs(os.path.join(rec, "logs"))
    open(os.path.join(rec, "logs", LOG_NAME), "w").write(HEAD.format(commit=commit) + (LOG if log is None else log))
    json.dump(meta or {"kind": "compare_flex", "question": "ours against Flex?", "goals": GOALS},
              open(os.path.join(rec, "record.json"), "w"))
    open(os.path.join(rec, "command.sh"), "w").write("python3 bench/compare_flex.py ALL.json\n")
    return rec


def tool(*args):
    return run_tool(TOOL, *args, timeout=120)



tmp = tempfile.mkdtemp(prefix="test_record_flex_")
try:
    rec = make(tmp)
    rc, out = tool(rec)
    check("a good log's figures are written", rc == 0, out)
    fig = json.load(open(os.path.join(rec, "figures.json"))) if rc == 0 else {}
    rg = fig.get("ranges", {})
    # exact: the speeds are the log's, as printed to two decimals
    check("speed vs Flex over the rows with a window or documents: fwd 1.31-2.43x, fwd+bwd 1.40-1.61x (exact)",
          rg.get("window_or_docs", {}).get("speed_fwd") == {"min": 1.31, "max": 2.43} and
          rg["window_or_docs"]["speed_fwdbwd"] == {"min": 1.40, "max": 1.61} and rg["window_or_docs"]["rows"] == 3,
          json.dumps(rg.get("window_or_docs")))
    check("over the dense causal rows: fwd 1.42-1.76x, fwd+bwd 1.28-1.37x (exact)",
          rg.get("dense_causal", {}).get("speed_fwd") == {"min": 1.42, "max": 1.76} and
          rg["dense_causal"]["speed_fwdbwd"] == {"min": 1.28, "max": 1.37}, json.dumps(rg.get("dense_causal")))
    check("by head dim: 128 with a window or documents fwd 1.75-2.43x (exact)",
          rg.get("window_or_docs", {}).get("by_head_dim", {}).get("128", {}).get("speed_fwd") == {"min": 1.75, "max": 2.43})
    check("against cuDNN, forward and forward + backward: 0.90-1.02x (exact)", rg.get("cudnn") == {"min": 0.90, "max": 1.02})
    rows = fig.get("rows", [])
    check("every row's times, TFLOP/s and cuDNN's (exact)", len(rows) == 5 and rows[2]["cudnn_fwdbwd_ms"] == 7.002 and
          rows[0]["flex_fwd_ms"] == 0.770 and rows[4]["ours_fwdbwd_tflops"] == 395.0 and "cudnn_fwd_ms" not in rows[0],
          json.dumps(rows[:1]))
    check("the code and card", fig.get("commit") == "e856b09" and fig.get("source") is None and fig.get("card") == "NVIDIA H200"
          and fig.get("calls") == 20)
    bw = {c["case"]: c for c in fig.get("backward", {}).get("cases", [])}
    # by hand: 1 - 4.833/5.419 = 10.814%, 1 - 2.254/2.676 = 15.770%, 1 - 7.695/8.215 = 6.330% (to 1e-3)
    check("the backward's faster choice and its saving, in percent (to 1e-3)",
          bw.get("d64dense", {}).get("faster") == "two-kernels" and abs(bw["d64dense"]["less_pct"] - 10.814) < 1e-3 and
          abs(bw["d64uni1024"]["less_pct"] - 15.770) < 1e-3 and bw["d128dense"]["faster"] == "fused" and
          abs(bw["d128dense"]["less_pct"] - 6.330) < 1e-3, json.dumps(bw))
    s = fig.get("backward", {}).get("by_head_dim", {})
    check("the saving's range by head dim (exact: the same rounded numbers)",
          s.get("64", {}).get("less_pct") == {"min": 10.814, "max": 15.77} and s["64"]["faster"] == "two-kernels" and
          s["128"]["faster"] == "fused", json.dumps(s))
    g = fig.get("goals", {})
    check("the goals: Flex fwd+bwd at 128 met with a window or documents (1.43x), not on dense causal (1.28x); cuDNN met",
          g.get("flex_fwdbwd", {}).get("128", {}).get("window_or_docs") == {"least": 1.43, "met": True} and
          g["flex_fwdbwd"]["128"]["dense_causal"] == {"least": 1.28, "met": False} and
          g["cudnn"] == {"goal": 0.9, "least": 0.90, "met": True}, json.dumps(g))
    table = record_figures.table(NAME, fig) if fig else ""
    check("its table prints the rows, the ranges and the backward", "| 65536, 6, 128 | causal + 1024 uni | 0.452, 1.859 |" in table
          and "| with a window or documents (3) | all | 1.31-2.43x | 1.40-1.61x |" in table and "10.8-15.8%" in table
          and "no source digest" in table, table)
    rc, out = tool("--check", tmp)
    check("--check passes on the untouched record", rc == 0, out)

    # one digit of one log: Flex's time, whose speed still rounds to 2.43x
    edit(os.path.join(rec, "logs", LOG_NAME), "| 0.770 |", "| 0.771 |")
    rc, out = tool("--check", tmp)
    check("--check fails on a log edited by one digit", rc == 1 and "does not recompute" in out, out)

    rec = make(tmp)
    tool(rec)
    edit(os.path.join(rec, "figures.json"), '"max": 2.43', '"max": 2.44')
    rc, out = tool("--check", tmp)
    check("--check fails on a figure edited by hand", rc == 1 and "does not recompute" in out, out)

    def refused(what, want, old=None, new=None, **kw):
        r = make(tmp, log=LOG.replace(old, new, 1) if old else None, **kw)
        if old:
            assert old in LOG, old
        rc, out = tool(r)
        check(f"refused: {what}", rc != 0 and want in out and "Traceback" not in out, out[-600:])

    refused("a missing Device line", LOG_NAME, "Device: NVIDIA H200;", "Card: NVIDIA H200;")
    refused("a missing table header", LOG_NAME, "| speed fwd |", "| speedfwd |")
    refused("a time that is no number", LOG_NAME + ":7", "| 0.452 |", "| 0.4x2 |")
    refused("a time typed nan", LOG_NAME + ":7", "| 0.452 |", "| nan |")
    refused("an exponent where a decimal stands", LOG_NAME + ":7", "| 0.791 |", "| 791e-3 |")
    refused("a speed that does not follow from its times", "does not follow", "| 1.75x |", "| 1.85x |")
    refused("a cuDNN speed that does not follow from its times", "does not follow", "(0.95x)", "(0.97x)")
    refused("a dense causal row without cuDNN's times", "no cuDNN", "| 1.243 (0.95x) | 4.416 (0.91x) |", "| - | - |")
    refused("a mask of neither group", "neither a window", "| causal + 1024 uni | 0.610", "| causal | 0.610")
    refused("a backward row of no known choice", LOG_NAME + ":16", "fused - d64dense", "fused 64 d64dense")
    refused("a backward case without the fused one", "d128dense", "fused - d128dense", "two-kernels 64 d128dense")
    refused("a dirty commit", "not a clean commit", commit="e856b09-dirty")
    refused("an empty commit", "commit", commit="")
    refused("two commits in the heading", "one commit", commit="e856b09 and commit 1a2b3c4")
    refused("goals that are no speeds", "goals", meta={"kind": "compare_flex", "question": "q", "goals": {"cudnn": "0.9"}})
finally:
    shutil.rmtree(tmp, ignore_errors=True)
finish("record-compare-flex")
