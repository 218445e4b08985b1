"""Record kind compare_flex: logs/NAME.md, one log: the ratio table bench/compare_flex.py writes
(its 'Device: CARD; PyTorch VERSION; bf16; times in ms (median of N)' line, its table of our,
FlexAttention's and, for dense causal, cuDNN's times, its closing sentence), under a first line
'# ... commit COMMIT ...' naming the code bench_attention was built from; optionally, after it,
'Backward choices ...' and a fenced block of bench_attention's rows, each opened by its ATTN_BWD
(fused or two-kernels) and ATTN_BWD_OWN (64, 128, or '-' for none), the case named dHEADDIM...
Figures: the commit, card, PyTorch version and calls a median; every row's shape, mask, times,
speeds (the other's time / ours, as printed) and TFLOP/s, each printed speed checked against the
printed times; the least and greatest speed against Flex, forward and forward + backward, over
the rows with a window or documents and over the dense causal ones (the rows with cuDNN's
columns), each also by head dim, and the least and greatest speed against cuDNN; per backward
case the fused time, the two kernels' at each block size and the faster of them, and how much
less time the faster choice takes (percent), their least and greatest by head dim. record.json
may add "goals" ({"flex_fwd": {"128": 1.3, "64": 1.2}, "flex_fwdbwd": {...}, "cudnn": 0.9}):
each is then set against the least speed it covers, as printed, and met or not (a Flex goal over
the rows of its head dim with a window or documents, and apart over the dense causal ones).
"""
import glob
import math
import os
import re

from tool_errors import ToolError
from record_kinds.common import checked_source, known_commit, number, read_text, stamp_text

KIND = "compare_flex"

DEVICE = re.compile(r"Device: ([ -~]+?); PyTorch (\S+); bf16; times in ms \(median of (\d+)\);.*")
HEADER = ("| T, heads, head dim | mask | ours fwd | flex fwd | speed fwd | ours fwd+bwd | flex fwd+bwd | speed fwd+bwd | "
          "ours TF/s fwd, fwd+bwd | cuDNN fwd | cuDNN fwd+bwd | flex block mask build |")
BWD = re.compile(r"(fused|two-kernels) (-|64|128) (d(64|128)\S*)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
WINDOW = re.compile(r"\b\d+ (uni|bi)\b|\bblocks\b")
SPEED = re.compile(r"([0-9]+\.[0-9]{2})x")


def count(text, where, name):
    if not re.fullmatch(r"[0-9]+", text):
        raise ToolError(f"{where}: {name} {text[:40]!r} is not a whole number")
    return int(text)


def speed(text, where, name):
    m = SPEED.fullmatch(text)
    if not m:
        raise ToolError(f"{where}: {name} {text[:40]!r} is not a speed (N.NNx)")
    return float(m.group(1))


def checked_speed(r, other, ours, where, name, ms_digits=3):
    """r, the printed other / ours, where it can follow from the printed times (each rounded to
    ms_digits decimals, r to two); ToolError otherwise: a speed or a time edited apart from the other."""
    h = 0.5 * 10 ** -ms_digits
    if ours - h <= 0:
        raise ToolError(f"{where}: our time {ours} is too small for a speed")
    lo, hi = (other - h) / (ours + h), (other + h) / (ours - h)
    if not (lo <= r + 0.005 + 1e-9 and r - 0.005 - 1e-9 <= hi):
        raise ToolError(f"{where}: {name} {r:.2f}x does not follow from the times ({other} / {ours} = {other / ours:.4f})")
    return r


def row_of(cells, where):
    shape = [s.strip() for s in cells[0].split(",")]
    if len(shape) != 3:
        raise ToolError(f"{where}: shape {cells[0][:40]!r} is not 'T, heads, head dim'")
    T, H, D = (count(s, where, n) for s, n in zip(shape, ("T", "heads", "head dim")))
    mask = cells[1]
    if not re.fullmatch(r"[ -~]+", mask):
        raise ToolError(f"{where}: mask {mask[:40]!r} is not a name")
    ours_f, flex_f = number(cells[2], where, "ours fwd"), number(cells[3], where, "flex fwd")
    ours_fb, flex_fb = number(cells[5], where, "ours fwd+bwd"), number(cells[6], where, "flex fwd+bwd")
    row = {"T": T, "heads": H, "head_dim": D, "mask": mask,
           "ours_fwd_ms": ours_f, "flex_fwd_ms": flex_f,
           "speed_fwd": checked_speed(speed(cells[4], where, "speed fwd"), flex_f, ours_f, where, "speed fwd"),
           "ours_fwdbwd_ms": ours_fb, "flex_fwdbwd_ms": flex_fb,
           "speed_fwdbwd": checked_speed(speed(cells[7], where, "speed fwd+bwd"), flex_fb, ours_fb, where, "speed fwd+bwd")}
    tf = [s.strip() for s in cells[8].split(",")]
    if len(tf) != 2:
        raise ToolError(f"{where}: TF/s {cells[8][:40]!r} is not 'fwd, fwd+bwd'")
    row["ours_fwd_tflops"] = number(tf[0], where, "ours fwd TF/s")
    row["ours_fwdbwd_tflops"] = number(tf[1], where, "ours fwd+bwd TF/s")
    if (cells[9] == "-") != (cells[10] == "-"):
        raise ToolError(f"{where}: cuDNN's forward and forward + backward columns: one without the other")
    if cells[9] != "-":
        for col, key, ours in ((9, "fwd", ours_f), (10, "fwdbwd", ours_fb)):
            m = re.fullmatch(r"(\S+) \((\S+)\)", cells[col])
            if not m:
                raise ToolError(f"{where}: cuDNN {key} {cells[col][:40]!r} is not 'MS (N.NNx)'")
            ms = number(m.group(1), where, f"cuDNN {key} ms")
            row[f"cudnn_{key}_ms"] = ms
            row[f"cudnn_speed_{key}"] = checked_speed(speed(m.group(2), where, f"cuDNN {key} speed"), ms, ours, where,
                                                      f"cuDNN {key} speed")
    row["flex_block_mask_ms"] = number(cells[11], where, "flex block mask build")
    # compare_flex.py times cuDNN on the dense causal rows alone (causal, no window, documents or prefix)
    dense = "cudnn_fwd_ms" in row
    if dense != (mask == "dense causal"):
        raise ToolError(f"{where}: mask {mask!r} " + ("has cuDNN's times but is not 'dense causal'" if dense else
                                                     "is 'dense causal' but has no cuDNN times"))
    if not dense and not (WINDOW.search(mask) or re.search(r"\bdocs\b", mask)):
        raise ToolError(f"{where}: mask {mask!r} names neither a window (N uni, N bi, blocks) nor docs: its range is unknown")
    row["group"] = "dense_causal" if dense else "window_or_docs"
    return row


def span(values):
    return {"min": min(values), "max": max(values)} if values else None


def parse(path):
    lines = read_text(path).splitlines()
    head = re.fullmatch(r"# .*", lines[0] if lines else "")
    commits = re.findall(r"\bcommit (\S+?)[:;,]?(?=\s|$)", lines[0]) if head else []
    if len(commits) != 1:
        raise ToolError(f"{path}:1: not a heading '# ... commit COMMIT ...' naming one commit (the code bench_attention ran)")
    commit = known_commit(commits[0], f"{path}:1", path)
    dev = header = None
    rows, bwd = [], []
    n, total = 1, len(lines)
    while n < total:
        line, where = lines[n], f"{path}:{n + 1}"
        n += 1
        m = DEVICE.fullmatch(line)
        if m:
            if dev:
                raise ToolError(f"{where}: a second Device line: a log is one run")
            dev = (m.group(1), m.group(2), count(m.group(3), where, "the calls a median"))
            continue
        if line == HEADER:
            if header is not None or not dev:
                raise ToolError(f"{where}: the table's header "
                                + ("a second time" if header is not None else "before the Device line"))
            header = n
            if n >= total or not re.fullmatch(r"\|( --- \|){12}", lines[n]):
                raise ToolError(f"{path}:{n + 1}: the table's header without its rule line")
            n += 1
            while n < total and lines[n].startswith("|"):
                cells = [c.strip() for c in lines[n].strip().strip("|").split("|")]
                if len(cells) != 12:
                    raise ToolError(f"{path}:{n + 1}: a row of {len(cells)} cells, not 12")
                rows.append(row_of(cells, f"{path}:{n + 1}"))
                n += 1
            continue
        if line.startswith("Backward choices"):
            if bwd or n >= total or lines[n] != "```":
                raise ToolError(f"{where}: the backward choices, not once and then a fenced block")
            n += 1
            while n < total and lines[n] != "```":
                w = f"{path}:{n + 1}"
                b = BWD.fullmatch(lines[n].strip())
                if not b or (b.group(1) == "fused") != (b.group(2) == "-"):
                    raise ToolError(f"{w}: not a backward choice's row (fused - dDNAME or two-kernels 64|128 dDNAME, "
                                    "then fwd ms, fwd TF/s, fwd+bwd ms, fwd+bwd TF/s, density)")
                vals = [number(b.group(i), w, name) for i, name in
                        zip(range(5, 10), ("fwd ms", "fwd TF/s", "fwd+bwd ms", "fwd+bwd TF/s", "density"))]
                bwd.append({"choice": b.group(1), "blocks": None if b.group(2) == "-" else int(b.group(2)),
                            "case": b.group(3), "head_dim": int(b.group(4)), "fwd_ms": vals[0], "fwd_tflops": vals[1],
                            "fwdbwd_ms": vals[2], "fwdbwd_tflops": vals[3], "density": vals[4], "where": w})
                n += 1
            if n >= total:
                raise ToolError(f"{path}: the backward choices' fenced block is not closed")
            n += 1
    if not dev:
        raise ToolError(f"{path}: no 'Device: CARD; PyTorch VERSION; bf16; times in ms (median of N); ...' line")
    if not rows:
        raise ToolError(f"{path}: no row of compare_flex.py's table (its header line, then rows)")
    return commit, dev, rows, bwd


def backward(bwd):
    """Per case the fused time, the two kernels' by block size and the faster choice's saving."""
    cases = {}
    for b in bwd:
        c = cases.setdefault(b["case"], {"case": b["case"], "head_dim": b["head_dim"], "fused_ms": None, "two_kernels_ms": {}})
        key = "fused_ms" if b["blocks"] is None else str(b["blocks"])
        if (c["fused_ms"] if key == "fused_ms" else c["two_kernels_ms"].get(key)) is not None:
            raise ToolError(f"{b['where']}: {b['choice']} {b['blocks'] or '-'} {b['case']} a second time: a log is one run")
        if key == "fused_ms":
            c["fused_ms"] = b["fwdbwd_ms"]
        else:
            c["two_kernels_ms"][key] = b["fwdbwd_ms"]
    out, by_dim = [], {}
    for c in cases.values():
        if c["fused_ms"] is None or not c["two_kernels_ms"]:
            raise ToolError(f"backward case {c['case']}: needs the fused backward and the two kernels both")
        best = min(c["two_kernels_ms"].values())
        c["two_kernels_best_ms"] = best
        c["faster"] = "two-kernels" if best < c["fused_ms"] else "fused"
        # how much less time the faster choice takes than the other, in percent of the other's
        c["less_pct"] = round(100 * (1 - min(best, c["fused_ms"]) / max(best, c["fused_ms"])), 3)
        out.append(c)
        by_dim.setdefault(str(c["head_dim"]), []).append(c)
    summary = {}
    for d, cs in sorted(by_dim.items(), key=lambda kv: int(kv[0])):
        faster = {c["faster"] for c in cs}
        summary[d] = {"faster": faster.pop() if len(faster) == 1 else "mixed", "cases": len(cs),
                      "less_pct": span([c["less_pct"] for c in cs])}
    rows = [{k: v for k, v in b.items() if k != "where"} for b in bwd]
    return {"rows": rows, "cases": out, "by_head_dim": summary}


def goals_of(meta, rows, ranges, rec):
    goals = meta.get("goals")
    if goals is None:
        return None
    where = f"{rec}/record.json: goals"
    if not isinstance(goals, dict) or set(goals) - {"flex_fwd", "flex_fwdbwd", "cudnn"}:
        raise ToolError(f"{where}: an object of flex_fwd, flex_fwdbwd ({{HEAD_DIM: SPEED}}) and cudnn (SPEED)")

    def goal(v, w):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ToolError(f"{w}: {v!r} is not a speed (a positive number)")
        return v
    out = {}
    for key in ("flex_fwd", "flex_fwdbwd"):
        if key in goals:
            if not isinstance(goals[key], dict) or not goals[key]:
                raise ToolError(f"{where}.{key}: an object {{HEAD_DIM: SPEED}}")
            out[key] = {}
            for d, v in goals[key].items():
                g = goal(v, f"{where}.{key}.{d}")
                out[key][d] = {"goal": g}
                for group in ("window_or_docs", "dense_causal"):
                    least = [r["speed_" + key[5:]] for r in rows if str(r["head_dim"]) == d and r["group"] == group]
                    out[key][d][group] = {"least": min(least), "met": min(least) >= g} if least else None
                if not any(out[key][d][group] for group in ("window_or_docs", "dense_causal")):
                    raise ToolError(f"{where}.{key}: head dim {d} has no row")
    if "cudnn" in goals:
        g = goal(goals["cudnn"], f"{where}.cudnn")
        if ranges["cudnn"] is None:
            raise ToolError(f"{where}.cudnn: no row has cuDNN's times")
        out["cudnn"] = {"goal": g, "least": ranges["cudnn"]["min"], "met": ranges["cudnn"]["min"] >= g}
    return out


def compute(rec, meta):
    paths = sorted(glob.glob(os.path.join(rec, "logs", "*.md")))
    if len(paths) != 1:
        raise ToolError(f"{rec}/logs: {len(paths)} .md logs: a compare_flex record holds one (one run of the script)")
    path = paths[0]
    commit, (card, torch, calls), rows, bwd = parse(path)
    source = checked_source(rec, [None], path)
    ranges = {}
    for group in ("window_or_docs", "dense_causal"):
        rs = [r for r in rows if r["group"] == group]
        dims = sorted({r["head_dim"] for r in rs})
        ranges[group] = {"rows": len(rs), "speed_fwd": span([r["speed_fwd"] for r in rs]),
                         "speed_fwdbwd": span([r["speed_fwdbwd"] for r in rs]),
                         "by_head_dim": {str(d): {"speed_fwd": span([r["speed_fwd"] for r in rs if r["head_dim"] == d]),
                                                  "speed_fwdbwd": span([r["speed_fwdbwd"] for r in rs if r["head_dim"] == d])}
                                         for d in dims}}
    dims = sorted({r["head_dim"] for r in rows})
    ranges["all_by_head_dim"] = {str(d): {"speed_fwd": span([r["speed_fwd"] for r in rows if r["head_dim"] == d]),
                                          "speed_fwdbwd": span([r["speed_fwdbwd"] for r in rows if r["head_dim"] == d])}
                                 for d in dims}
    ranges["cudnn"] = span([r[k] for r in rows for k in ("cudnn_speed_fwd", "cudnn_speed_fwdbwd") if k in r])
    fig = {"kind": KIND, "commit": commit, "source": source, "card": card, "pytorch": torch, "calls": calls,
           "log": os.path.basename(path), "rows": rows, "ranges": ranges}
    if bwd:
        fig["backward"] = backward(bwd)
    goals = goals_of(meta, rows, ranges, rec)
    if goals is not None:
        fig["goals"] = goals
    return fig


def rng(s, fmt="{:.2f}", unit="x"):
    return "-" if s is None else (fmt.format(s["min"]) + unit if s["min"] == s["max"] else
                                  f"{fmt.format(s['min'])}-{fmt.format(s['max'])}{unit}")


def table(rec_name, fig):
    """The markdown a page quotes for a record: every row, the ranges, the backward's choices."""
    out = [f"Record `results/records/{rec_name}` ({fig['card']}, {stamp_text(fig)}; PyTorch {fig['pytorch']}; "
           f"each time the median of {fig['calls']} calls; speed = the other's time / ours):", "",
           "| T, heads, head dim | mask | ours fwd, fwd+bwd ms | Flex fwd, fwd+bwd ms | speed vs Flex fwd, fwd+bwd | "
           "cuDNN fwd, fwd+bwd ms | speed vs cuDNN fwd, fwd+bwd | ours TFLOP/s fwd, fwd+bwd |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in fig["rows"]:
        cd = ("-", "-")
        if "cudnn_fwd_ms" in r:
            cd = (f"{r['cudnn_fwd_ms']:.3f}, {r['cudnn_fwdbwd_ms']:.3f}",
                  f"{r['cudnn_speed_fwd']:.2f}x, {r['cudnn_speed_fwdbwd']:.2f}x")
        out.append(f"| {r['T']}, {r['heads']}, {r['head_dim']} | {r['mask']} | "
                   f"{r['ours_fwd_ms']:.3f}, {r['ours_fwdbwd_ms']:.3f} | "
                   f"{r['flex_fwd_ms']:.3f}, {r['flex_fwdbwd_ms']:.3f} | {r['speed_fwd']:.2f}x, {r['speed_fwdbwd']:.2f}x | "
                   f"{cd[0]} | {cd[1]} | {r['ours_fwd_tflops']:.1f}, {r['ours_fwdbwd_tflops']:.1f} |")
    rg = fig["ranges"]
    out += ["", "| rows | head dim | speed vs Flex fwd | speed vs Flex fwd+bwd |", "| --- | --- | --- | --- |"]
    for group, label in (("window_or_docs", "with a window or documents"), ("dense_causal", "dense causal")):
        g = rg[group]
        if g["rows"]:
            out.append(f"| {label} ({g['rows']}) | all | {rng(g['speed_fwd'])} | {rng(g['speed_fwdbwd'])} |")
            for d, s in g["by_head_dim"].items():
                out.append(f"| {label} | {d} | {rng(s['speed_fwd'])} | {rng(s['speed_fwdbwd'])} |")
    if rg["cudnn"]:
        out.append(f"| dense causal against cuDNN, fwd and fwd+bwd | all | {rng(rg['cudnn'])} | |")
    if "goals" in fig:
        out += ["", "| goal | head dim | goal speed | least speed | met |", "| --- | --- | --- | --- | --- |"]
        for key, label in (("flex_fwd", "Flex fwd"), ("flex_fwdbwd", "Flex fwd+bwd")):
            for d, g in fig["goals"].get(key, {}).items():
                for group, rows in (("window_or_docs", "with a window or documents"), ("dense_causal", "dense causal")):
                    if g[group]:
                        out.append(f"| {label}, {rows} | {d} | {g['goal']}x | {g[group]['least']:.2f}x | "
                                   f"{'yes' if g[group]['met'] else 'no'} |")
        if "cudnn" in fig["goals"]:
            g = fig["goals"]["cudnn"]
            out.append(f"| cuDNN, dense causal | all | {g['goal']}x | {g['least']:.2f}x | {'yes' if g['met'] else 'no'} |")
    if "backward" in fig:
        out += ["", "Backward choices, forward + backward ms (`ATTN_BWD`, `ATTN_BWD_OWN`):", "",
                "| case | head dim | fused | two kernels, blocks of 128 | two kernels, blocks of 64 | faster | less time |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for c in fig["backward"]["cases"]:
            tk = c["two_kernels_ms"]
            out.append(f"| {c['case']} | {c['head_dim']} | {c['fused_ms']:.3f} | "
                       + " | ".join(f"{tk[b]:.3f}" if b in tk else "-" for b in ("128", "64"))
                       + f" | {c['faster']} | {c['less_pct']:.1f}% |")
        for d, s in fig["backward"]["by_head_dim"].items():
            out.append(f"| head dim {d} ({s['cases']} cases) | {d} | | | | {s['faster']} | {rng(s['less_pct'], '{:.1f}', '%')} |")
    return "\n".join(out) + "\n"
