"""Records of kind ab_campaign (scripts/record_kinds/ab_campaign.py): a small campaign of two
variants, two seeds each, written in train_gpt's log format (its lines copied from a run of the
mask ablation at the speedrun's size, shortened to 12 steps), gives the figures ab_report's checks
and ab_stats' tests give; --check fails on a log edited by one digit and on a figure edited by hand;
a hostile log (a line missing, a figure that is no number, nan, two commits in one group, a dirty or
empty commit) is refused with its file named.

    python3 tests/test_record_ab_campaign.py
"""
import json
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, edit, finish, run_tool  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = [sys.executable, os.path.join(ROOT, "scripts", "record_figures.py")]
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ab_stats  # noqa: E402

STEPS = 12
# the configuration line of results/records/2026-11-23_ab_campaign_mask-speedrun-h200/logs/uni_g1_r0.jsonl,
# its run id, seed, mask, steps and commit set by each run below
CONFIG = json.loads(
    '{"event":"config","run_id":"822e692cf7d2f8ac","preset":"speedrun","train_data":"data/gcide/gcide_train_*.bin",'
    '"val_data":"data/gcide/gcide_val_*.bin","vocab_size":50257,"log_file":"/root/out/mask/causal/uni_g1_r0.txt",'
    '"layers":12,"width":768,"heads":6,"hidden":3072,"vocab":50304,"seq_len":65536,"seqs_per_step":8,"steps":20,'
    '"window_blocks":0,"window_mask":"uni","window_granularity":"block","causal":1,"doc_mask":1,"prefix_tokens":0,'
    '"prefix_attention":1,"seed":1000,"val_every":10,"val_tokens":655360,"checkpoint_dir":"","checkpoint_every":0,'
    '"resume":"","grad_sync":"overlap","timeout":300.0,"check_replicas":false,"world_size":1,"gpu":"NVIDIA H200",'
    '"git_commit":"fe56605"}')
CAMPAIGN = {"variants": [["uni", "--window-mask uni"], ["bi", "--window-mask bi"]], "gpus": [1], "runs": 2, "seed0": 1000,
            "common": ["--preset", "speedrun", "--steps", str(STEPS), "--train-data", "data/gcide/gcide_train_*.bin",
                       "--val-data", "data/gcide/gcide_val_*.bin", "--val-every", "6", "--val-tokens", "655360", "--causal", "1"],
            "trainer": "./train_gpt", "mpirun_args": ""}
# final validation losses (the loss at step 6 is the final one plus 0.5): bi repeats uni to the
# bit for seed 1000 and differs for seed 1001
FINAL = {("uni", 0): 2.7934, ("uni", 1): 2.8043, ("bi", 0): 2.7934, ("bi", 1): 2.8122}
STEP_MS = {("uni", 0): 948.7, ("uni", 1): 951.2, ("bi", 0): 953.1, ("bi", 1): 952.4}


def write_run(d, variant, i, commit="fe56605", final=None):
    """VARIANT_g1_rI.txt and .jsonl as train_gpt writes them: run id, configuration, every step."""
    rid = f"{abs(hash((variant, i))) % (1 << 60):016x}"[:16]
    final = FINAL[(variant, i)] if final is None else final
    cfg = dict(CONFIG, run_id=rid, window_mask=variant, seed=1000 + i, steps=STEPS, val_every=6, git_commit=commit,
               log_file=f"/root/out/{variant}_g1_r{i}.txt")
    txt = [f"run_id:{rid} train_gpt {commit}",
           f"train_gpt: NVIDIA H200 x 1, 394004032 parameters, {STEPS} steps of 524288 tokens (8 micro-step(s) of one "
           "sequence per GPU)"]
    js = [json.dumps(cfg, separators=(",", ":"))]
    ms = STEP_MS[(variant, i)]
    for s in range(0, STEPS + 1):
        t = max(0.0, (s - 10) * ms)
        avg = f"{t / (s - 10):.2f}ms" if s > 10 else "nanms"
        if s >= 1:  # a step's line, then its validation's, as train_gpt writes them
            loss = round(8.0 - s * 0.4, 4)
            txt.append(f"step:{s}/{STEPS} train_loss:{loss:.4f} train_time:{t:.0f}ms step_avg:{avg}")
            js.append(json.dumps({"event": "step", "step": s, "total_steps": STEPS, "train_time_ms": t, "train_loss": loss}))
        if s in (0, 6, STEPS):
            v = 10.8258 if s == 0 else round(final + (0.5 if s == 6 else 0.0), 4)
            txt.append(f"step:{s}/{STEPS} val_loss:{v:.4f} train_time:{t:.0f}ms step_avg:{avg}")
            js.append(json.dumps({"event": "val", "step": s, "total_steps": STEPS, "train_time_ms": t, "val_loss": v}))
    txt.append("train_gpt: done; peak GPU memory 32057 MiB")
    open(os.path.join(d, f"{variant}_g1_r{i}.txt"), "w").write("\n".join(txt) + "\n")
    open(os.path.join(d, f"{variant}_g1_r{i}.jsonl"), "w").write("\n".join(js) + "\n")


def make(tmp, name="2026-11-23_ab_campaign_t", meta=None, commits=None):
    rec = os.path.join(tmp, name)
    shutil.rmtree(rec, ignore_errors=True)
    logs = os.path.join(rec, "logs")
    os.makedirs(logs)
    for v in ("uni", "bi"):
        for i in range(2):
            write_run(logs, v, i, **({"commit": commits[(v, i)]} if commits and (v, i) in commits else {}))
    json.dump(CAMPAIGN, open(os.path.join(logs, "campaign.json"), "w"))
    json.dump(meta or {"kind": "ab_campaign", "question": "uni against bi?", "data": "the GCIDE shards of make data"},
              open(os.path.join(rec, "record.json"), "w"))
    open(os.path.join(rec, "command.sh"), "w").write("bash ablations/mask_ablation.sh\n")
    return rec


def tool(*args):
    return run_tool(TOOL, *args, timeout=300)



tmp = tempfile.mkdtemp(prefix="test_record_ab_")
try:
    rec = make(tmp)
    rc, out = tool(rec)
    check("a good campaign's figures are written", rc == 0, out)
    fig = json.load(open(os.path.join(rec, "figures.json")))
    g = {(x["variant"], x["gpus"]): x for x in fig["groups"]}
    uni = [FINAL[("uni", i)] for i in range(2)]
    bi = [FINAL[("bi", i)] for i in range(2)]
    check("the groups in campaign.json's order, uni the baseline", [x["variant"] for x in fig["groups"]] == ["uni", "bi"])
    # tolerance: the figures are rounded to 6 decimals (losses), 7 (their std), 4 significant digits (p)
    check("final validation loss mean and std per variant (to 1e-6)",
          abs(g[("bi", 1)]["final_val_loss"]["mean"] - ab_stats.mean(bi)) < 1e-6 and
          abs(g[("bi", 1)]["final_val_loss"]["std"] - ab_stats.std(bi)) < 1e-6, json.dumps(g[("bi", 1)]["final_val_loss"]))
    c = fig["comparisons"][0]
    want_p = ab_stats.welch(bi, uni)[2]
    check("Welch's p of bi against uni is ab_stats' (to 4 significant digits)",
          abs(c["final_val_loss"]["welch_p"] - want_p) <= 1e-4 * want_p, f"{c['final_val_loss']} against {want_p}")
    check("step average difference bi - uni (exact to 1e-3 ms)",
          abs(c["step_avg_ms"]["difference"] - (ab_stats.mean([STEP_MS[("bi", i)] for i in range(2)]) -
                                                ab_stats.mean([STEP_MS[("uni", i)] for i in range(2)]))) < 1e-3,
          json.dumps(c["step_avg_ms"]))
    check("pairs identical to the bit: 1 of 2 (seed 1000 alike, seed 1001 not)",
          c["paired"]["pairs"] == 2 and c["paired"]["identical_to_the_bit"] == 1 and c["paired"]["not_identical"] == 1,
          json.dumps(c["paired"]))
    check("the losses at each validation step (0, 6, 12)", [s["step"] for s in g[("uni", 1)]["val_steps"]] == [0, 6, STEPS])
    check("the commit and card", fig["code"]["uni"] == {"commit": "fe56605"} and fig["card"] == "NVIDIA H200", json.dumps(fig["code"]))
    rc, out = tool("--check", tmp)
    check("--check passes on the untouched record", rc == 0, out)

    # one digit of one log, in both files (the text and its JSON lines agree): the figures differ
    log = os.path.join(rec, "logs", "bi_g1_r1")
    edit(log + ".txt", f"step:{STEPS}/{STEPS} val_loss:2.8122", f"step:{STEPS}/{STEPS} val_loss:2.8123")
    edit(log + ".jsonl", '"val_loss": 2.8122', '"val_loss": 2.8123')
    rc, out = tool("--check", tmp)
    check("--check fails on a log edited by one digit", rc == 1 and "does not recompute" in out, out)
    # the text alone: the JSON lines no longer agree, and the log is refused, named
    edit(log + ".txt", f"step:{STEPS}/{STEPS} val_loss:2.8123", f"step:{STEPS}/{STEPS} val_loss:2.8124")
    rc, out = tool("--check", tmp)
    check("--check refuses a text log edited apart from its JSON lines, naming it", rc != 0 and "bi_g1_r1" in out, out)

    rec = make(tmp)
    tool(rec)
    fpath = os.path.join(rec, "figures.json")
    edit(fpath, '"identical_to_the_bit": 1', '"identical_to_the_bit": 2')
    rc, out = tool("--check", tmp)
    check("--check fails on a figure edited by hand", rc == 1 and "does not recompute" in out, out)

    def refused(what, mutate, want, **kw):
        r = make(tmp, **kw)
        if mutate:
            mutate(os.path.join(r, "logs"))
        rc, out = tool(r)
        check(f"refused: {what}", rc != 0 and want in out and "Traceback" not in out, out[-800:])

    refused("a missing final validation line", lambda d: edit(os.path.join(d, "uni_g1_r0.txt"),
            f"step:{STEPS}/{STEPS} val_loss:2.7934", f"step:{STEPS}/{STEPS} val_lss:2.7934"), "uni_g1_r0")
    refused("a figure that is no number", lambda d: edit(os.path.join(d, "uni_g1_r0.txt"),
            "step:6/12 val_loss:3.2934", "step:6/12 val_loss:3.29x4"), "uni_g1_r0.txt")
    refused("a loss typed nan", lambda d: edit(os.path.join(d, "uni_g1_r0.txt"),
            "step:6/12 val_loss:3.2934", "step:6/12 val_loss:nan"), "uni_g1_r0.txt")
    refused("an exponent where a decimal stands", lambda d: edit(os.path.join(d, "bi_g1_r0.txt"),
            "step:11/12 train_loss:3.6000", "step:11/12 train_loss:36e-1"), "bi_g1_r0.txt:")
    refused("two commits in one group", None, "uni_g1_r1", commits={("uni", 1): "0f141a1"})
    refused("a dirty commit", None, "not a clean commit", commits={(v, i): "fe56605-dirty" for v in ("uni", "bi") for i in range(2)})
    refused("an empty commit without a provenance", None, "not a clean commit",
            commits={("bi", i): "" for i in range(2)} | {("uni", i): "" for i in range(2)})
    refused("a record without its data sentence", None, "no 'data'", meta={"kind": "ab_campaign", "question": "q"})

    # a provenance names the code of a variant whose logs carry no commit, and the table prints it
    meta = {"kind": "ab_campaign", "question": "q", "data": "d", "provenance": {"uni": "the code of commit fe56605"},
            "compare": [["bi", "uni", "unpaired"]]}
    rec = make(tmp, meta=meta, commits={("uni", i): "" for i in range(2)})
    rc, out = tool(rec)
    # campaign.json's checks refuse a git_commit that differs between the variants (none of their
    # flags): a provenance is for logs without one, such as the learning comparison's
    check("refused: a campaign whose variants differ in git_commit", rc != 0 and "git_commit" in out, out[-600:])
    os.remove(os.path.join(rec, "logs", "campaign.json"))
    meta["variants"] = ["uni", "bi"]
    json.dump(meta, open(os.path.join(rec, "record.json"), "w"))
    rc, out = tool(rec)
    fig = json.load(open(os.path.join(rec, "figures.json"))) if rc == 0 else {}
    check("without campaign.json, record.json's variants order the groups and a provenance names uni's code",
          rc == 0 and fig["code"]["uni"] == {"provenance": "the code of commit fe56605"} and "paired" not in fig["comparisons"][0],
          out + json.dumps(fig.get("code")))
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import record_figures
    check("its table prints the provenance", "no commit in its logs: the code of commit fe56605" in
          record_figures.table(os.path.basename(rec), fig) if fig else False)
    meta["variants"] = ["uni", "bx"]
    json.dump(meta, open(os.path.join(rec, "record.json"), "w"))
    rc, out = tool(rec)
    check("refused: record.json's variants that are not the logs'", rc != 0 and "variants" in out and "Traceback" not in out, out)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
finish("record-ab-campaign")
