"""Records of kinds scaling and profile (scripts/record_kinds/scaling.py, profile.py): a small host
of runs on 1, 2 and 4 GPUs in train_gpt's log format (its lines copied from
results/records/2026-11-27_scaling_h200x4 and 2026-11-27_profile_h200x4, shortened to 14 steps)
gives the median steps, speed-ups and loss counts worked out by hand below; --check fails on a log
edited by one digit and on a figure edited by hand; a hostile log (a line missing, a figure that is
no number, nan, two commits in one record, a dirty commit, a group of two configurations, a log no
group names) is refused with its file named. A profile log gives its categories, and one whose
categories do not sum to its total is refused.

    python3 tests/test_record_scaling.py
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

STEPS, TIMED = 14, 4  # steps 11-14 timed
# the configuration line of results/records/2026-11-27_scaling_h200x4/logs/new_g1_b.jsonl; steps,
# run id, GPU count and gradient exchange set by each run below
CONFIG = json.loads(
    '{"event":"config","run_id":"60f78b4a7fcce3a4","preset":"speedrun","train_data":"data/synthetic/synth_train_*.bin",'
    '"val_data":"data/synthetic/synth_val_*.bin","vocab_size":50257,"log_file":"logs/new_g1_b.txt","layers":12,"width":768,'
    '"heads":6,"hidden":3072,"vocab":50304,"seq_len":65536,"seqs_per_step":8,"steps":30,"window_blocks":8,"window_mask":"uni",'
    '"window_granularity":"block","causal":1,"doc_mask":1,"prefix_tokens":0,"prefix_attention":1,"seed":1337,'
    '"val_every":100000,"val_tokens":65536,"checkpoint_dir":"","checkpoint_every":0,"resume":"","grad_sync":"end",'
    '"grad_exchange":"fp32","timeout":300.0,"check_replicas":false,"world_size":1,"gpu":"NVIDIA H200","git_commit":"a9d9a38"}')
# each run's timed steps' times, ms (the median of four is the mean of the middle two)
TIMES = {"g1": [870.1, 869.0, 869.9, 870.5], "g2": [439.3, 439.2, 439.4, 439.0], "g4": [223.3, 223.1, 223.4, 223.2],
         "g4_bf16": [224.6, 224.5, 224.7, 224.6]}
MEDIAN = {"g1": 870.0, "g2": 439.25, "g4": 223.25, "g4_bf16": 224.6}
PROFILE = """profile: GPU time per step by category, over 10 steps
  embeddings (fwd+bwd)                   21.01 ms    2.4%
  norms, rotary, ReLU^2, mixes           58.46 ms    6.7%
  block matmuls (fwd+bwd)               435.66 ms   49.9%
  attention forward                      39.07 ms    4.5%
  attention backward                    129.42 ms   14.8%
  lm head + softcapped CE               179.29 ms   20.6%
  optimizer and exchange (exposed)        8.93 ms    1.0%
  GPU idle: host work                     0.46 ms    0.1%
  total                                 872.31 ms
profile: GPU time per step by operation (calls a step)
  attention forward                  attention forward                      39.07 ms    96.0
"""


def write_run(d, name, gpus, commit="a9d9a38", exchange="fp32", loss_shift=0.0, profile=False):
    """NAME.txt and NAME.jsonl as train_gpt writes them."""
    rid = f"{abs(hash(name)) % (1 << 60):016x}"
    cfg = dict(CONFIG, run_id=rid, steps=STEPS, world_size=gpus, git_commit=commit, grad_exchange=exchange,
               log_file=f"logs/{name}.txt")
    txt = [f"run_id:{rid} train_gpt {commit}",
           f"train_gpt: NVIDIA H200 x {gpus}, 394004032 parameters, {STEPS} steps of 524288 tokens "
           f"({8 // gpus} micro-step(s) of one sequence per GPU)"]
    js = [json.dumps(cfg, separators=(",", ":"))]
    loss0 = 10.825841903686523
    txt.append(f"step:0/{STEPS} val_loss:{loss0:.4f} train_time:0ms step_avg:nanms")
    js.append(json.dumps({"event": "val", "step": 0, "total_steps": STEPS, "train_time_ms": 0.0, "val_loss": loss0}))
    t = 0.0
    for s in range(1, STEPS + 1):
        if s > STEPS - TIMED:
            t += TIMES[name][s - (STEPS - TIMED) - 1]
        loss = 10.85 + 0.0123456789 * s + loss_shift
        txt.append(f"step:{s}/{STEPS} train_loss:{loss:.4f} train_time:{t:.0f}ms step_avg:nanms")
        js.append(json.dumps({"event": "step", "step": s, "total_steps": STEPS, "train_time_ms": t, "train_loss": loss}))
    final = 10.8504246018 + loss_shift
    txt.append(f"step:{STEPS}/{STEPS} val_loss:{final:.4f} train_time:{t:.0f}ms step_avg:1.00ms")
    js.append(json.dumps({"event": "val", "step": STEPS, "total_steps": STEPS, "train_time_ms": t, "val_loss": final}))
    txt.append(f"train_gpt: {TIMED} timed steps: median {MEDIAN[name]:.1f} ms a step, 603313 tokens/s, 488.3 TFLOP/s a GPU, "
               "MFU 49.4% (bf16 dense peak 989 TFLOP/s a GPU)")
    if profile:
        txt.append(PROFILE.rstrip("\n"))
    txt.append("train_gpt: done; peak GPU memory 27555 MiB")
    js.append(json.dumps({"event": "summary", "timed_steps": float(TIMED), "median_step_ms": MEDIAN[name], "tokens_per_s": 603313.2,
                          "peak_memory_mib": 27554.8}))
    open(os.path.join(d, name + ".txt"), "w").write("\n".join(txt) + "\n")
    open(os.path.join(d, name + ".jsonl"), "w").write("\n".join(js) + "\n")


GROUPS = {"default": {"runs": ["g1", "g2", "g4"]}, "bf16": {"runs": ["g4_bf16"], "one_gpu_of": "default"}}


def make(tmp, name="2026-11-27_scaling_t", groups=None, **kw):
    rec = os.path.join(tmp, name)
    os.makedirs(os.path.join(rec, "logs"))
    json.dump({"kind": "scaling", "question": "test", "groups": groups or GROUPS}, open(os.path.join(rec, "record.json"), "w"))
    open(os.path.join(rec, "command.sh"), "w").write("./train_gpt\n")
    for n, g in (("g1", 1), ("g2", 2), ("g4", 4)):
        write_run(os.path.join(rec, "logs"), n, g, **kw.get(n, {}))
    write_run(os.path.join(rec, "logs"), "g4_bf16", 4, exchange="bf16", loss_shift=1e-4, profile=True)
    return rec


def tool(*args):
    return run_tool(TOOL, *args, timeout=300)



tmp = tempfile.mkdtemp(prefix="record_scaling_")
try:
    rec = make(os.path.join(tmp, "a"))
    rc, out = tool(rec)
    check("a scaling record's figures are written", rc == 0, out)
    fig = json.load(open(os.path.join(rec, "figures.json")))
    d = fig["groups"]["default"]["per_gpus"]
    # the speed-ups: 870.0 / 439.25 and 870.0 / 223.25, as stored (4 decimals); the bf16 run against
    # the default's one GPU, 870.0 / 224.6
    check("the median steps are the middle of the timed steps' times (to 1e-9 ms)",
          all(abs(r["median_step_ms"] - MEDIAN[r["log"]]) < 1e-9 for g in fig["groups"].values() for r in g["runs"]),
          fig["groups"])
    check("the speed-ups are the one-GPU step over the N-GPU step (to the 6 decimals stored)",
          [r.get("speedup") for r in d] == [None, round(870.0 / 439.25, 6), round(870.0 / 223.25, 6)], d)
    b = fig["groups"]["bf16"]
    check("a group with one_gpu_of divides that group's one-GPU step, naming the configuration's differences",
          b["per_gpus"][0]["speedup"] == round(870.0 / 224.6, 6) and b["differs_from_it"] == ["grad_exchange", "profile"], b)
    check("the loss sequences: 4 GPUs, 2 runs, 2 distinct (the bf16 run's losses differ); 1 and 2 GPUs one each (exact)",
          [(x["gpus"], x["runs"], x["distinct"]) for x in fig["loss_sequences"]] == [(1, 1, 1), (2, 1, 1), (4, 2, 2)],
          fig["loss_sequences"])
    check("the range of speed-ups over the record (exact)", (fig["speedup_min"], fig["speedup_max"]) ==
          (round(870.0 / 439.25, 6), round(870.0 / 223.25, 6)), fig)
    same = fig["groups"]["default"]["runs"]
    check("equal losses have equal digests, the bf16 run's another (exact)",
          same[0]["losses_sha256"] == same[2]["losses_sha256"] != b["runs"][0]["losses_sha256"], fig["groups"])
    check("a profiled run keeps its categories and total (exact), and its group is another configuration",
          b["runs"][0]["profile"]["total_ms"] == 872.31 and len(b["runs"][0]["profile"]["categories"]) == 8
          and b["differs_from_it"] == ["grad_exchange", "profile"], b)
    check("each run's peak memory (exact)", all(r["peak_mib"] == 27555 for g in fig["groups"].values() for r in g["runs"]), fig)
    root = os.path.join(tmp, "a")
    rc, out = tool("--check", root)
    check("--check passes on the record as written", rc == 0, out)
    # a step's time edited by one digit in the JSON lines: its median and the summary no longer agree
    jl = os.path.join(rec, "logs", "g4.jsonl")
    keep = open(jl).read()
    edit(jl, '"median_step_ms": 223.25', '"median_step_ms": 223.35')
    rc, out = tool("--check", root)
    check("--check fails on the summary's median edited by one digit, naming the log", rc != 0 and "g4.jsonl" in out, out[-600:])
    open(jl, "w").write(keep)
    t = os.path.join(rec, "logs", "g2.txt")
    keep = open(t).read()
    edit(t, "median 439.2 ms", "median 438.2 ms")
    rc, out = tool("--check", root)
    check("--check fails on the text log's median edited by one digit, naming the log", rc != 0 and "g2.txt" in out, out[-600:])
    open(t, "w").write(keep)
    fp = os.path.join(rec, "figures.json")
    keep = open(fp).read()
    edit(fp, str(round(870.0 / 223.25, 6)), "3.9")
    rc, out = tool("--check", root)
    check("--check fails on a speed-up edited by hand", rc != 0 and "does not recompute" in out, out[-600:])
    open(fp, "w").write(keep)
    rc, out = tool("--check", root)
    check("--check passes again once restored", rc == 0, out)

    n = [0]

    def refused(what, mutate, want, groups=None, **kw):
        n[0] += 1
        r = make(os.path.join(tmp, f"h{n[0]}"), groups=groups, **kw)
        if mutate:
            mutate(os.path.join(r, "logs"))
        rc, out = tool(r)
        check(f"refused: {what}", rc != 0 and want in out and "Traceback" not in out, out[-800:])

    refused("a missing median line", lambda d: edit(os.path.join(d, "g2.txt"), "train_gpt: 4 timed steps", "train_gpt: timed"),
            "g2.txt")
    refused("a median that is no number", lambda d: edit(os.path.join(d, "g2.txt"), "median 439.2 ms", "median 43x.2 ms"), "g2.txt")
    refused("a loss in the text that is no number", lambda d: edit(os.path.join(d, "g1.txt"), "train_loss:10.8747",
                                                                      "train_loss:1e1"), "g1.txt")
    refused("a step's time typed NaN in the JSON lines",
            lambda d: edit(os.path.join(d, "g4.jsonl"), '"train_time_ms": 223.3,', '"train_time_ms": NaN,'), "g4.jsonl")
    refused("the JSON lines' median not the timed steps'",
            lambda d: edit(os.path.join(d, "g1.jsonl"), '"median_step_ms": 870.0', '"median_step_ms": 870.5'), "g1.jsonl")
    refused("two commits in one record", None, "2 commits", g2={"commit": "0f141a1"})
    refused("a dirty commit", None, "g4.txt:1", g4={"commit": "a9d9a38-dirty"})
    refused("a group of two configurations", None, "group default",
            groups={"default": {"runs": ["g1", "g2", "g4", "g4_bf16"]}})
    refused("a log no group names", None, "g4_bf16", groups={"default": {"runs": ["g1", "g2", "g4"]}})
    refused("a run without its peak memory line (unfinished)",
            lambda d: edit(os.path.join(d, "g1.txt"), "train_gpt: done; peak GPU memory 27555 MiB", "train_gpt: error: x"), "g1.txt")
    refused("a group whose runs are no names", None, "group 'default'",
            groups={"default": {"runs": ["g1", 5]}, "bf16": {"runs": ["g4_bf16"]}})
    refused("a group's one_gpu_of that is no group", None, "one_gpu_of",
            groups={"default": {"runs": ["g1", "g2", "g4"]}, "bf16": {"runs": ["g4_bf16"], "one_gpu_of": "none"}})
    refused("a config line without its steps", lambda d: edit(os.path.join(d, "g2.jsonl"), '"steps":14,', ''), "g2.jsonl")
    refused("a missing JSON lines file", lambda d: os.remove(os.path.join(d, "g2.jsonl")), "g2.jsonl")

    # profile
    prec = os.path.join(tmp, "p", "2026-11-27_profile_t")
    os.makedirs(os.path.join(prec, "logs"))
    json.dump({"kind": "profile", "question": "test"}, open(os.path.join(prec, "record.json"), "w"))
    open(os.path.join(prec, "command.sh"), "w").write("./train_gpt --profile 10\n")
    write_run(os.path.join(prec, "logs"), "g1", 1, profile=True)
    rc, out = tool(prec)
    check("a profile record's figures are written", rc == 0, out)
    pf = json.load(open(os.path.join(prec, "figures.json")))
    cats = pf["runs"][0]["categories"]
    check("the profile's categories and total as the log prints them (exact)",
          len(cats) == 8 and cats[2] == {"category": "block matmuls (fwd+bwd)", "ms": 435.66} and pf["runs"][0]["total_ms"] == 872.31
          and pf["runs"][0]["profiled_steps"] == 10, pf)
    rc, out = tool("--check", os.path.join(tmp, "p"))
    check("--check passes on the profile record", rc == 0, out)
    lg = os.path.join(prec, "logs", "g1.txt")
    edit(lg, "435.66 ms", "435.76 ms")
    rc, out = tool("--check", os.path.join(tmp, "p"))
    check("a category edited by one digit no longer sums to the total (within 0.005 ms a row): refused, naming the log",
          rc != 0 and "g1.txt" in out and "sum" in out, out[-600:])
    edit(lg, "435.76 ms", "435.66 ms")
    edit(lg, "  total                                 872.31 ms\n", "")
    rc, out = tool(prec)
    check("a profile without its total line is refused, naming the log", rc != 0 and "g1.txt" in out and "Traceback" not in out,
          out[-600:])
    edit(lg, "GPU idle: host work                     0.46 ms    0.1%\n",
         "GPU idle: host work                     0.46 ms    0.1%\n  total                                 nan ms\n")
    rc, out = tool(prec)
    check("a total typed nan is refused, naming the log", rc != 0 and "g1.txt" in out and "not a number" in out, out[-600:])
finally:
    shutil.rmtree(tmp)
finish("record-scaling")
