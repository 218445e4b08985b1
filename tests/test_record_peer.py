"""Records of kinds peer_compare and peer_full_run (scripts/record_kinds/peer_compare.py,
peer_full_run.py): small records written in train_gpt's and the peer's log formats (their lines
copied from results/records/2026-11-28_peer_compare_h100x4 and 2026-11-28_peer_full_run_h100x4,
shortened to a few steps), with summary.txt written by the scripts' own code (peer_compare.sh's
summary, peer/full_run_logs.py's table), give the figures computed here by hand; --check fails on a
log edited by one digit and on a figure edited by hand; a summary that disagrees, a missing line, a
figure that is no number, nan, two commits in one record, a dirty commit and a record without its
provenance are each refused with the file named.

    python3 tests/test_record_peer.py
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, edit, finish, run_tool  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = [sys.executable, os.path.join(ROOT, "scripts", "record_figures.py")]
CARD = "NVIDIA H100 80GB HBM3"
PROV = "the commit is the GIT_COMMIT set by hand for the run, not read from the tree"
# results/records/2026-11-28_peer_compare_h100x4/logs/train_gpt_1.jsonl's configuration, its run
# id, steps, GPU count and commit set by each run below
TG_CONFIG = json.loads(
    '{"event":"config","run_id":"8c5275f135afa7d5","preset":"speedrun","train_data":"data/synthetic/synth_train_*.bin",'
    '"val_data":"data/synthetic/synth_val_*.bin","vocab_size":50257,"log_file":"train_gpt_1.txt","layers":12,"width":768,'
    '"heads":6,"hidden":3072,"vocab":50304,"seq_len":65536,"seqs_per_step":8,"steps":20,"window_blocks":8,'
    '"window_mask":"uni","window_granularity":"block","causal":1,"doc_mask":1,"prefix_tokens":0,"prefix_attention":1,'
    '"seed":1337,"val_every":100000,"val_tokens":65536,"checkpoint_dir":"","checkpoint_every":0,"resume":"",'
    '"grad_sync":"end","grad_exchange":"fp32","timeout":300.0,"check_replicas":false,"world_size":1,'
    '"gpu":"NVIDIA H100 80GB HBM3","git_commit":"cebc219"}')
PEER_CONFIG = json.loads(
    '{"event": "config", "trainer": "torch_peer", "run_id": "a61df96122751809", "train_data": "data/synthetic/synth_train_*.bin", '
    '"val_data": "data/synthetic/synth_val_*.bin", "layers": 12, "width": 768, "heads": 6, "hidden": 3072, "vocab": 50304, '
    '"seq_len": 65536, "seqs_per_step": 8, "steps": 20, "val_every": 100000, "val_tokens": 65536, "window_blocks": 8, '
    '"window_mask": "uni", "window_granularity": "block", "causal": 1, "doc_mask": 1, "numerics": "record", "seed": 1337, '
    '"world_size": 1, "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "compile": 1, "git_commit": "cebc219"}')


def write_run(d, name, trainer, gpus, step_ms, peak, startup, commit="cebc219", val_every=100000, val_loss=11.0190,
              train_data="data/synthetic/synth_train_*.bin"):
    """NAME.txt and NAME.jsonl as train_gpt or torch_peer write them: configuration, each step's
    train_time (step_ms[i] for step 11 + i; the clock starts after step 10), validations, summary."""
    steps = 10 + len(step_ms)
    rid = f"{abs(hash(name)) % (1 << 60):016x}"
    peer = trainer == "peer"
    cfg = dict(PEER_CONFIG if peer else TG_CONFIG, run_id=rid, steps=steps, world_size=gpus, git_commit=commit,
               val_every=val_every, train_data=train_data)
    dump = (lambda e: json.dumps(e)) if peer else (lambda e: json.dumps(e, separators=(",", ":")))
    prog = "torch_peer" if peer else "train_gpt"
    txt = [f"run_id:{rid} torch_peer" if peer else f"run_id:{rid} train_gpt {commit}"]
    if peer:
        txt.append(f"torch_peer: {CARD}, torch 2.11.0+cu130, 394002486 parameters, {steps} steps of 524288 tokens, "
                   "numerics record" + (f", {gpus} GPUs ({8 // gpus} micro-steps of one sequence each)" if gpus > 1 else ""))
    else:
        txt.append(f"train_gpt: {CARD} x {gpus}, 394004032 parameters, {steps} steps of 524288 tokens "
                   f"({8 // gpus} micro-step(s) of one sequence per GPU)")
    js = [dump(cfg)]
    t = 0.0
    for s in range(steps + 1):
        if s > 10:
            t += step_ms[s - 11]
        t = round(t, 6)
        if s == 0 or s % val_every == 0 or s == steps:
            loss = val_loss if s == steps else 10.8258 + s / 1000
            if s:
                txt.append(f"step:{s}/{steps} train_loss:10.9000 train_time:{t:.0f}ms step_avg:{t / (s - 10):.2f}ms")
                js.append(dump({"event": "step", "step": s, "total_steps": steps, "train_time_ms": t, "train_loss": 10.9}))
            txt.append(f"step:{s}/{steps} val_loss:{loss:.4f} train_time:{t:.0f}ms step_avg:"
                       + (f"{t / (s - 10):.2f}ms" if s > 10 else "nanms"))
            js.append(dump({"event": "val", "step": s, "total_steps": steps, "train_time_ms": t, "val_loss": loss}))
        else:
            txt.append(f"step:{s}/{steps} train_loss:10.9000 train_time:{t:.0f}ms step_avg:"
                       + (f"{t / (s - 10):.2f}ms" if s > 10 else "nanms"))
            js.append(dump({"event": "step", "step": s, "total_steps": steps, "train_time_ms": t, "train_loss": 10.9}))
        if s == 1:
            txt.append(f"{prog}: start-up {startup:.1f} s (launch to the end of the first training step, the step-0 "
                       "validation included)")
            js.append(dump({"event": "startup", "startup_s": startup}))
    med = statistics.median(step_ms)
    txt.append(f"{prog}: {len(step_ms)} timed steps: median {med:.1f} ms a step, 573413 tokens/s")
    js.append(dump({"event": "summary", "timed_steps": len(step_ms), "median_step_ms": med, "peak_memory_mib": peak,
                    **({"peak_reserved_mib": peak + 4010.0} if peer else {})}))
    txt.append(f"{prog}: done; peak GPU memory {peak:.0f} MiB" + (f" allocated, {peak + 4010.0:.0f} MiB reserved" if peer else ""))
    with open(os.path.join(d, name + ".txt"), "w") as f:
        f.write("\n".join(txt) + "\n")
    with open(os.path.join(d, name + ".jsonl"), "w") as f:
        f.write("\n".join(js) + "\n")


# step times (ms) of each run: step 11 on
COMPARE = {1: {"train_gpt_1": [914.3, 913.1, 915.9], "peer": [1202.2, 1199.4, 1204.6], "train_gpt_2": [909.3, 910.4, 908.8]},
           2: {"train_gpt_1_g2": [460.2, 461.0, 459.1], "peer_g2": [620.3, 618.8, 621.7], "train_gpt_2_g2": [459.7, 460.9, 458.2]}}
PEAK = {"train_gpt": 27554.8125, "peer": 34113.451171875}


def summary_script():
    """peer_compare.sh's own summary program: its python3 heredoc."""
    text = open(os.path.join(ROOT, "peer", "peer_compare.sh")).read()
    m = re.search(r"<<'EOF' \| tee \"\$LOG_DIR/summary.txt\"\n(.*?)\nEOF\n", text, re.S)
    return m.group(1)


def make_compare(tmp, name="2026-11-28_peer_compare_t", counts=(1, 2), meta=None):
    rec = os.path.join(tmp, "results", "records", name)
    logs = os.path.join(rec, "logs")
    os.makedirs(logs)
    for n in counts:
        for run, ms in COMPARE[n].items():
            trainer = "peer" if run.startswith("peer") else "train_gpt"
            write_run(logs, run, trainer, n, ms, PEAK[trainer], 7.04 if trainer == "train_gpt" else 68.98)
    r = subprocess.run([sys.executable, "-", logs, "1102"] + [str(n) for n in counts], input=summary_script(),
                       capture_output=True, text=True, timeout=60)
    with open(os.path.join(logs, "summary.txt"), "w") as f:
        f.write(r.stdout)
    with open(os.path.join(rec, "record.json"), "w") as f:
        json.dump(meta or {"kind": "peer_compare", "question": "how long is the step?", "provenance": PROV}, f)
    with open(os.path.join(rec, "command.sh"), "w") as f:
        f.write("GPUS=1,2 STEPS=13 bash peer/peer_compare.sh\n")
    return rec


FULL_MS = {"train_gpt": [211.0 + i for i in range(30)], "peer": [278.0 + 1.5 * i for i in range(30)]}


def make_full(tmp, name="2026-11-28_peer_full_run_t", meta=None):
    rec = os.path.join(tmp, "results", "records", name)
    logs = os.path.join(rec, "logs")
    os.makedirs(logs)
    for trainer, ms in FULL_MS.items():
        write_run(logs, f"{trainer}_g2", trainer, 2, ms, PEAK[trainer], 13.8 if trainer == "train_gpt" else 111.8,
                  val_every=15, val_loss=11.3069 if trainer == "train_gpt" else 11.4790,
                  train_data="data/synthetic_full/synth_train_*.bin")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "peer", "full_run_logs.py"), "table", logs, "2", "40",
                        "data/synthetic_full/synth_train_*.bin"], capture_output=True, text=True, timeout=60)
    with open(os.path.join(logs, "summary.txt"), "w") as f:
        f.write(r.stdout.rstrip("\n") + "\n")  # peer_full_run.sh: echo "$(table)" | tee summary.txt
    with open(os.path.join(rec, "record.json"), "w") as f:
        json.dump(meta or {"kind": "peer_full_run", "question": "the whole schedule?", "provenance": PROV}, f)
    with open(os.path.join(rec, "command.sh"), "w") as f:
        f.write("GPUS=2 STEPS=40 bash peer/peer_full_run.sh\n")
    return rec


def tool(*args):
    return run_tool(TOOL, *args, timeout=300)



def close(a, b, tol):
    return abs(a - b) <= tol


tmp = tempfile.mkdtemp()
try:
    # peer_compare: figures against the step times written above (tolerance 1e-6 ms: rounded to 6 places)
    rec = make_compare(tmp)
    rc, out = tool(rec)
    check("a peer_compare record's figures are written", rc == 0, out)
    fig = json.load(open(os.path.join(rec, "figures.json")))
    g1, g2 = fig["groups"]
    t1, p1, t2 = (statistics.median(v) for v in COMPARE[1].values())
    u1, p2, u2 = (statistics.median(v) for v in COMPARE[2].values())
    check("peer_compare: each run's median step is its timed steps' median (within 1e-6 ms)",
          all(close(g1["runs"][k]["median_ms"], statistics.median(v), 1e-6) for k, v in COMPARE[1].items()), str(g1))
    check("peer_compare: train_gpt / peer is the mean of train_gpt's two runs over the peer's (within 1e-6)",
          close(g1["ratio"], (t1 + t2) / 2 / p1, 1e-6) and close(g2["ratio"], (u1 + u2) / 2 / p2, 1e-6), str(g1["ratio"]))
    check("peer_compare: each run's ratio (within 1e-6)", close(g1["ratio_runs"][0], t1 / p1, 1e-6)
          and close(g1["ratio_runs"][1], t2 / p1, 1e-6), str(g1["ratio_runs"]))
    check("peer_compare: scaling from one GPU, of train_gpt's mean and of the peer (within 1e-6)",
          close(g2["scaling"]["train_gpt"], (t1 + t2) / (u1 + u2), 1e-6) and close(g2["scaling"]["peer"], p1 / p2, 1e-6),
          str(g2.get("scaling")))
    check("peer_compare: peak memory in GiB, card, commit and provenance (peak exact to 1e-6 GiB)",
          close(g1["runs"]["peer"]["peak_gib"], PEAK["peer"] / 1024, 1e-6) and fig["card"] == CARD
          and fig["commit"] == "cebc219" and fig["provenance"] == PROV and fig["gpus"] == [1, 2], str(fig)[:300])
    root = os.path.join(tmp, "results", "records")
    rc, out = tool("--check", root)
    check("--check passes on the peer_compare record as written", rc == 0, out)

    # peer_full_run: figures against the step times written above
    full = make_full(tmp)
    rc, out = tool(full)
    check("a peer_full_run record's figures are written", rc == 0, out)
    ff = json.load(open(os.path.join(full, "figures.json")))
    tt, tp = sum(FULL_MS["train_gpt"]) / 1000, sum(FULL_MS["peer"]) / 1000
    check("peer_full_run: train_time is the last validation's train_time (within 1e-6 s), its ratio (within 1e-6)",
          close(ff["runs"]["train_gpt"]["train_time_s"], tt, 1e-6) and close(ff["ratio_train_time"], tt / tp, 1e-6),
          str(ff["runs"]))
    check("peer_full_run: peak memory ratio, and against the peer's reserved (within 1e-6)",
          close(ff["ratio_peak"], PEAK["train_gpt"] / PEAK["peer"], 1e-6)
          and close(ff["ratio_peak_reserved"], PEAK["train_gpt"] / (PEAK["peer"] + 4010.0), 1e-6), str(ff["ratio_peak"]))
    spans = [(s["steps"], s["train_gpt_ms"]) for s in ff["spans"]]
    want = [([11, 15], sum(FULL_MS["train_gpt"][0:5]) / 5), ([16, 30], sum(FULL_MS["train_gpt"][5:20]) / 15),
            ([31, 40], sum(FULL_MS["train_gpt"][20:30]) / 10)]
    check("peer_full_run: each span between validations, ms a step (within 1e-6 ms)",
          len(spans) == 3 and all(a[0] == b[0] and close(a[1], b[1], 1e-6) for a, b in zip(spans, want)), str(spans))
    check("peer_full_run: the final validation losses (within 1e-9)",
          close(ff["runs"]["train_gpt"]["final_val_loss"], 11.3069, 1e-9) and close(ff["runs"]["peer"]["final_val_loss"], 11.4790, 1e-9))
    rc, out = tool("--check", root)
    check("--check passes on both records as written", rc == 0, out)

    def broken(what, rec, path, old, new, want):
        """--check fails, naming want, once the file at path (under rec) has old replaced by new."""
        keep = os.path.join(tmp, "keep")
        shutil.copytree(rec, keep)
        try:
            edit(os.path.join(rec, path), old, new)
            rc, out = tool("--check", root)
            check(what, rc != 0 and want in out, out[-600:])
        finally:
            shutil.rmtree(rec)
            shutil.move(keep, rec)

    # edits by one digit: the text log's median, a JSON step time, summary.txt, figures.json
    broken("--check fails on a text log's median edited by one digit", rec, "logs/peer.txt", "median 1202.2 ms",
           "median 1202.3 ms", "peer.txt")
    broken("--check fails on a JSON step time edited by one digit", rec, "logs/train_gpt_2_g2.jsonl",
           '"step":12,"total_steps":13,"train_time_ms":920.6', '"step":12,"total_steps":13,"train_time_ms":921.6',
           "train_gpt_2_g2")
    broken("--check fails on summary.txt edited by one digit", rec, "logs/summary.txt", "0.758", "0.759", "summary.txt")
    broken("--check fails on a peer_full_run log edited by one digit", full, "logs/peer_g2.txt",
           "val_loss:11.4790", "val_loss:11.4791", "peer_g2.txt")
    broken("--check fails on a figure edited by hand", rec, "figures.json", '"ratio": 0.', '"ratio": 1.',
           "does not recompute")

    # hostile logs and records, each refused with the file named
    broken("a log without its timed-median line is refused", rec, "logs/train_gpt_1.txt", "train_gpt: 3 timed steps",
           "train_gpt: three timed steps", "train_gpt_1.txt: no timed median line")
    broken("a figure that is no number is refused", full, "logs/train_gpt_g2.jsonl", '"val_loss":11.3069',
           '"val_loss":"11.3069"', "train_gpt_g2.jsonl")
    broken("nan is refused", rec, "logs/peer.jsonl", '"peak_memory_mib": 34113.451171875', '"peak_memory_mib": NaN',
           "peer.jsonl")
    broken("two commits in one record are refused", rec, "logs/train_gpt_2.txt", "train_gpt cebc219",
           "train_gpt a5469dd", "train_gpt_2.txt:1")
    for p in ("logs/train_gpt_2.txt", "logs/train_gpt_2.jsonl"):
        edit(os.path.join(rec, p), "cebc219", "a5469dd")
    rc, out = tool("--check", root)
    check("two commits in one record (both logs of a run agreeing) are refused", rc != 0 and "a record is one code" in out,
          out[-400:])
    for p in ("logs/train_gpt_2.txt", "logs/train_gpt_2.jsonl"):
        edit(os.path.join(rec, p), "a5469dd", "cebc219")
    for p in ("logs/train_gpt_1.txt", "logs/train_gpt_1.jsonl"):
        edit(os.path.join(rec, p), "cebc219", "cebc219-dirty")
    rc, out = tool("--check", root)
    check("a dirty commit is refused, the log named", rc != 0 and "not a clean commit" in out and "train_gpt_1.txt" in out,
          out[-400:])
    for p in ("logs/train_gpt_1.txt", "logs/train_gpt_1.jsonl"):
        edit(os.path.join(rec, p), "cebc219-dirty", "cebc219")
    broken("a peer whose JSON lines name another commit is refused", full, "logs/peer_g2.jsonl",
           '"git_commit": "cebc219"', '"git_commit": "a5469dd"', "a record is one code")
    broken("a record without its provenance is refused", full, "record.json", '"provenance"', '"origin"',
           "no \"provenance\"")
    broken("a run on another card is refused", rec, "logs/peer_g2.txt", f"torch_peer: {CARD}", "torch_peer: NVIDIA H200",
           "peer_g2.txt")
    rc, out = tool("--check", root)
    check("--check passes again once every edit is undone", rc == 0, out)

    # a peer whose call set no GIT_COMMIT (empty git_commit) stands on its provenance, the others' commit kept
    for n in ("peer", "peer_g2"):
        edit(os.path.join(rec, "logs", n + ".jsonl"), '"git_commit": "cebc219"', '"git_commit": ""')
    rc, out = tool(rec)
    check("a peer with an empty commit is taken on the record's provenance", rc == 0
          and json.load(open(os.path.join(rec, "figures.json")))["commit"] == "cebc219", out)

    # a record after the build began stamping its source digest: train_gpt's logs name it, and it is kept
    late = make_compare(tmp, name="2026-12-09_peer_compare_src", counts=(1,))
    for n in ("train_gpt_1", "train_gpt_2"):
        path = os.path.join(late, "logs", n + ".txt")
        lines = open(path).read().split("\n")
        open(path, "w").write("\n".join([lines[0] + " source:" + "ab" * 32] + lines[1:]))
    rc, out = tool(late)
    check("a later record whose train_gpt logs name their source digest: taken, the digest kept", rc == 0
          and json.load(open(os.path.join(late, "figures.json"))).get("source") == "ab" * 32, out)
    edit(os.path.join(late, "logs", "train_gpt_2.txt"), " source:" + "ab" * 32, "")
    rc, out = tool(late)
    check("a later record with a train_gpt log that names no digest: refused", rc == 1 and "source digests" in out, out)
finally:
    shutil.rmtree(tmp)
finish("record-peer")
