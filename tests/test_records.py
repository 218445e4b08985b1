"""Result records (scripts/record_figures.py): every record's figures recompute from its logs, and
every page that quotes them quotes them as they are; a figure edited by hand, a log edited by one
digit, a page's quote edited, a dirty or unknown commit and a malformed record are each caught.
bench_matmul records (stamped logs, one build a label) likewise, and scripts/record_bench_matmul.sh
makes one from stand-in binaries, never touching an existing record.

    python3 tests/test_records.py
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = [sys.executable, os.path.join(ROOT, "scripts", "record_figures.py")]


def tool(*args, cwd=None):
    r = subprocess.run(TOOL + list(args), capture_output=True, text=True, cwd=cwd, timeout=120)
    return r.returncode, r.stdout + r.stderr


# the records in the tree
records = os.path.join(ROOT, "results", "records")
if os.path.isdir(records):
    rc, out = tool("--check", records)
    check("every record in results/records recomputes, and every page quotes its figures as they are", rc == 0, out[-3000:])

LOG = """run_id:00000000000000{i} train_gpt 0123abc{source}
train_gpt: NVIDIA H100 80GB HBM3 x 1, 54657600 parameters, 300 steps of 65536 tokens (8 micro-step(s) of one sequence per GPU)
step:0/300 val_loss:10.8258 train_time:0ms step_avg:nanms
step:300/300 train_loss:1.5834 train_time:9903ms step_avg:34.15ms
step:300/300 val_loss:1.65{i}9 train_time:9903ms step_avg:34.15ms
train_gpt: 290 timed steps: median 2{i}.4 ms a step, 1919118 tokens/s, 188.4 TFLOP/s a GPU, MFU 19.0% (bf16 dense peak 989 TFLOP/s a GPU)
train_gpt: done; peak GPU memory 2913 MiB
"""
CRASH = """run_id:0000000000000009 train_gpt 0123abc source:0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a
train_gpt: NVIDIA H100 80GB HBM3 x 1, 54657600 parameters, 300 steps of 65536 tokens (8 micro-step(s) of one sequence per GPU)
step:69/300 train_loss:2.2786 train_time:1357ms step_avg:22.99ms
train_gpt: error: optimizer step 70: unspecified launch failure
"""


def make_tree(tmp):
    """A repository-shaped tree with one record of each kind and a page quoting the first."""
    rec = os.path.join(tmp, "results", "records", "2026-01-01_default_job_test")
    os.makedirs(os.path.join(rec, "logs"))
    json.dump({"kind": "default_job", "question": "test"}, open(os.path.join(rec, "record.json"), "w"))
    open(os.path.join(rec, "command.sh"), "w").write("./train_gpt\n")
    for i in (1, 2):
        source = " source:" + "0a" * 32  # the source tree's digest, which the build stamps
        open(os.path.join(rec, "logs", f"run_{i:02d}.txt"), "w").write(LOG.format(i=i, source=source))
    open(os.path.join(rec, "logs", "run_03.txt"), "w").write(CRASH)
    tg = os.path.join(tmp, "results", "records", "2026-01-01_test_gpu_test")
    os.makedirs(os.path.join(tg, "logs"))
    json.dump({"kind": "test_gpu", "question": "test"}, open(os.path.join(tg, "record.json"), "w"))
    open(os.path.join(tg, "command.sh"), "w").write("make test-gpu\n")
    open(os.path.join(tg, "logs", "commit.txt"), "w").write("0123abc\n")
    open(os.path.join(tg, "logs", "gpu.txt"), "w").write("NVIDIA H100 80GB HBM3, 580.159.04\n")
    open(os.path.join(tg, "logs", "gpu-layers.txt"), "w").write(
        "layer-adam: 5 passed, 0 failed\ngemm_stress: 1300 cases, 20000 repetitions, 0 failed, 41.2 s\nlayer-gemm_stress: 2602 passed, 0 failed\n")
    open(os.path.join(tg, "logs", "gpu-layers.rc"), "w").write("0\n")
    os.makedirs(os.path.join(tmp, "results", "topic"))
    open(os.path.join(tmp, "results", "topic", "README.md"), "w").write(
        "# Topic\n\n<!-- figures: 2026-01-01_default_job_test -->\n<!-- /figures -->\n")
    return rec, tg


tmp = tempfile.mkdtemp(prefix="records_test_")
try:
    rec, tg = make_tree(tmp)
    root = os.path.join(tmp, "results", "records")
    rc1, out1 = tool(rec)
    rc2, out2 = tool(tg)
    rc3, out3 = tool("--pages", root)
    rc4, out4 = tool("--check", root)
    check("figures written for both kinds, the page's quote written, and --check passes", rc1 == rc2 == rc3 == rc4 == 0,
          out1 + out2 + out3 + out4)
    fig = json.load(open(os.path.join(rec, "figures.json")))
    check("default_job figures: runs, completed, the failure's error line, the losses and steps of the completed runs",
          fig["runs"] == 3 and fig["completed"] == 2 and fig["failures"] == ["run_03.txt: optimizer step 70: unspecified launch failure"]
          and fig["final_val_loss_min"] == 1.6519 and fig["final_val_loss_max"] == 1.6529 and fig["median_step_ms_min"] == 21.4
          and fig["median_step_ms_max"] == 22.4 and fig["card"] == "NVIDIA H100 80GB HBM3 x 1" and fig["source"] == "0a" * 32,
          json.dumps(fig)[:600])
    tfig = json.load(open(os.path.join(tg, "figures.json")))
    check("test_gpu figures: a suite's checks summed, the stress test's size",
          tfig["suites"]["gpu-layers"] == {"rc": 0, "passed": 2607, "failed": 0, "stress_cases": 1300, "stress_repetitions": 20000,
                                           "stress_seconds": 41.2} and tfig["all_passed"], json.dumps(tfig))
    page = open(os.path.join(tmp, "results", "topic", "README.md")).read()
    check("the page quotes the record's table", "| runs completed | 2 of 3 |" in page and "1.6519 to 1.6529" in page, page)

    def caught(what, path, old, new, expect):
        text = open(path).read()
        assert old in text, (path, old)
        open(path, "w").write(text.replace(old, new, 1))
        rc, out = tool("--check", root)
        open(path, "w").write(text)
        check(f"--check catches {what}", rc == 1 and expect in out, out[-800:])

    caught("a log edited by one digit", os.path.join(rec, "logs", "run_01.txt"), "val_loss:1.6519", "val_loss:1.6518",
           "2026-01-01_default_job_test/figures.json: does not recompute")
    caught("a figure edited by hand", os.path.join(rec, "figures.json"), '"final_val_loss_max": 1.6529', '"final_val_loss_max": 1.6528',
           "does not recompute from the logs (differs in final_val_loss_max)")
    caught("a suite's log edited", os.path.join(tg, "logs", "gpu-layers.txt"), "2602 passed", "2603 passed",
           "2026-01-01_test_gpu_test/figures.json: does not recompute")
    caught("a page's quote edited by hand", os.path.join(tmp, "results", "topic", "README.md"), "2 of 3", "3 of 3",
           "the quoted figures of 2026-01-01_default_job_test differ")
    caught("a dirty commit", os.path.join(rec, "logs", "run_02.txt"), "train_gpt 0123abc", "train_gpt 0123abc-dirty",
           "is not a clean commit")
    caught("an unknown commit", os.path.join(tg, "logs", "commit.txt"), "0123abc", "unknown", "is not a clean commit")
    caught("two commits in one record", os.path.join(rec, "logs", "run_02.txt"), "train_gpt 0123abc", "train_gpt 4567def",
           "the runs name 2 commits")
    caught("two source digests in one record", os.path.join(rec, "logs", "run_02.txt"), "source:" + "0a" * 32, "source:" + "0b" * 32,
           "the logs name 2 source digests")
    caught("a run without the source digest beside runs with it", os.path.join(rec, "logs", "run_02.txt"), " source:" + "0a" * 32, "",
           "the logs name 2 source digests")
    # a record dated after the build stamped its source digest names one; one dated before may not
    late = rec.replace("2026-01-01_", "2026-12-08_")
    shutil.copytree(rec, late)
    os.remove(os.path.join(late, "logs", "run_03.txt"))  # (the crash's log names a digest)
    for i in (1, 2):
        log = os.path.join(late, "logs", f"run_{i:02d}.txt")
        text = open(log).read()
        open(log, "w").write(text.replace(" source:" + "0a" * 32, ""))
    rc, out = tool(late)
    check("a record dated after 2026-12-07 whose logs name no source digest is refused",
          rc == 1 and "name no source digest: a record dated after 2026-12-07" in out, out)
    early = rec.replace("2026-01-01_", "2026-11-30_")
    os.rename(late, early)
    rc, out = tool(early)
    shown = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import record_figures as r; "
                            "print(r.table('x', r.compute(sys.argv[2])))", os.path.join(ROOT, "scripts"), early],
                           capture_output=True, text=True, timeout=60)
    check("a record dated before it names the commit alone, and its page's table says so",
          rc == 0 and '"source"' not in open(os.path.join(early, "figures.json")).read()
          and "no source digest: built before the build stamped one" in shown.stdout, out + shown.stdout + shown.stderr)
    shutil.rmtree(early)
    # a commit that the repository holding the record does not have
    subprocess.run(["git", "init", "-q", tmp], check=True, timeout=60)
    subprocess.run(["git", "-C", tmp, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "t"],
                   check=True, timeout=60)
    rc, out = tool(rec)
    check("in a full clone, a commit that is not the repository's is refused",
          rc == 1 and "commit 0123abc is not a commit of this repository" in out, out)
    real = subprocess.run(["git", "-C", tmp, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=60).stdout.strip()
    for i in (1, 2, 3):
        log = os.path.join(rec, "logs", f"run_{i:02d}.txt")
        text = open(log).read()
        open(log, "w").write(text.replace("train_gpt 0123abc", f"train_gpt {real}"))
    rc, out = tool(rec)
    check("and one of its commits is taken", rc == 0, out)
    shutil.rmtree(os.path.join(tmp, ".git"))
    for i in (1, 2, 3):
        log = os.path.join(rec, "logs", f"run_{i:02d}.txt")
        text = open(log).read()
        open(log, "w").write(text.replace(f"train_gpt {real}", "train_gpt 0123abc"))
    tool(rec)
    # the JSON lines beside the logs: how many distinct loss sequences the completed runs hold
    seqrec = rec.replace("2026-01-01_default_job_test", "2026-12-09_default_job_seq")
    shutil.copytree(rec, seqrec)
    for i in (1, 2):
        open(os.path.join(seqrec, "logs", f"run_{i:02d}.jsonl"), "w").write(
            '{"event":"config","run_id":"00000000000000%d"}\n{"event":"step","step":1,"train_loss":10.825841903686523}\n'
            '{"event":"val","step":300,"val_loss":1.6519000000000001}\n' % i)
    rc, out = tool(seqrec)
    seqfig = json.load(open(os.path.join(seqrec, "figures.json"))) if rc == 0 else {}
    check("runs whose JSON lines hold the same losses, to the bit: one loss sequence", seqfig.get("loss_sequences") == 1, out)
    j2 = os.path.join(seqrec, "logs", "run_02.jsonl")
    text2 = open(j2).read()
    open(j2, "w").write(text2.replace("10.825841903686523", "10.825841903686524"))
    rc, out = tool(seqrec)
    seqfig = json.load(open(os.path.join(seqrec, "figures.json"))) if rc == 0 else {}
    check("a loss that differs in its last digit: two sequences", seqfig.get("loss_sequences") == 2, out)
    open(j2, "w").write(text2.replace('"run_id":"000000000000002"', '"run_id":"000000000000001"'))
    rc, out = tool(seqrec)
    check("JSON lines of another run are refused, naming the file", rc == 1 and "run_02.jsonl:1: not the JSON lines of run_02.txt" in out,
          out)
    open(j2, "w").write(text2.replace('"step":1,', '"step":1'))
    rc, out = tool(seqrec)
    check("a JSON line that is not JSON is refused, naming file and line", rc == 1 and "run_02.jsonl:2: not a JSON line" in out, out)
    open(j2, "w").write(text2)
    early = seqrec.replace("2026-12-09_", "2026-12-08_")
    os.rename(seqrec, early)
    rc, out = tool(early)
    seqfig = json.load(open(os.path.join(early, "figures.json"))) if rc == 0 else {}
    check("a record of 2026-12-08 or before: no such figure (its figures stay those of its day)",
          rc == 0 and "loss_sequences" not in seqfig, out)
    os.rename(early, seqrec)
    os.remove(j2)
    rc, out = tool(seqrec)
    seqfig = json.load(open(os.path.join(seqrec, "figures.json"))) if rc == 0 else {}
    check("a completed run without JSON lines: no such figure", rc == 0 and "loss_sequences" not in seqfig, out)
    shutil.rmtree(seqrec)
    caught("a page quoting no record", os.path.join(tmp, "results", "topic", "README.md"), "figures: 2026-01-01_default_job_test",
           "figures: 2026-01-01_nothing", "quotes record 2026-01-01_nothing")
    caught("an unknown kind", os.path.join(rec, "record.json"), "default_job", "defaultjob", "is not one of")
    # hostile inputs to the checker: each must be refused or counted, never passed
    caught("an empty card file", os.path.join(tg, "logs", "gpu.txt"), "NVIDIA H100 80GB HBM3, 580.159.04\n", "",
           "gpu.txt: '' is not a card's name")
    caught("a final loss that is not a number", os.path.join(rec, "logs", "run_01.txt"), "val_loss:1.6519", "val_loss:1.65x9",
           "run_01.txt: step 300's val_loss '1.65x9' is not a number")
    caught("a figure edited to another JSON type", os.path.join(rec, "figures.json"), '"completed": 2,', '"completed": 2.0,',
           "figures.json: does not recompute from the logs")
    caught("a quote's closing marker gone", os.path.join(tmp, "results", "topic", "README.md"), "<!-- /figures -->\n", "\n",
           "a figures marker without its match")
    caught("a quote's opening marker mistyped", os.path.join(tmp, "results", "topic", "README.md"), "<!-- figures:", "<!--  figures:",
           "a figures marker without its match")
    caught("a suite's stress test failing", os.path.join(tg, "logs", "gpu-layers.txt"), "20000 repetitions, 0 failed",
           "20000 repetitions, 5 failed", "2026-01-01_test_gpu_test/figures.json: does not recompute")
    # a diverged final loss is a failed run, not a completed one left out of the figures
    text = open(os.path.join(rec, "logs", "run_01.txt")).read()
    open(os.path.join(rec, "logs", "run_01.txt"), "w").write(text.replace("step:300/300 val_loss:1.6519", "step:300/300 val_loss:diverged(nan)"))
    rc, out = tool(rec)
    fig2 = json.load(open(os.path.join(rec, "figures.json")))
    check("a run whose final loss diverged is counted as failed, naming the loss",
          rc == 0 and fig2["completed"] == 1 and "run_01.txt: final validation loss diverged(nan)" in fig2["failures"], out + json.dumps(fig2)[:400])
    open(os.path.join(rec, "logs", "run_01.txt"), "w").write(text)
    # several GPUs' completion line
    text = open(os.path.join(rec, "logs", "run_02.txt")).read()
    assert "MiB\n" in text
    open(os.path.join(rec, "logs", "run_02.txt"), "w").write(text.replace(" MiB\n", " MiB (the largest rank's)\n", 1))
    rc, out = tool(rec)
    check("a run on several GPUs ('MiB (the largest rank's)') is a completed run",
          rc == 0 and json.load(open(os.path.join(rec, "figures.json")))["completed"] == 2, out)
    open(os.path.join(rec, "logs", "run_02.txt"), "w").write(text)
    tool(rec)
    # a suite's log without its exit code
    open(os.path.join(tg, "logs", "gpu-model.txt"), "w").write("model: 3 passed, 5 failed\n")
    rc, out = tool("--check", root)
    check("a suite's log without its exit code is refused, naming it", rc == 1 and "gpu-model.txt: a suite's log without its exit code" in out, out)
    os.remove(os.path.join(tg, "logs", "gpu-model.txt"))
    # a folder under records/ without record.json, and a missing figures.json
    os.makedirs(os.path.join(root, "2026-01-02_default_job_lost"))
    rc, out = tool("--check", root)
    check("a record's folder without record.json is reported", rc == 1 and "2026-01-02_default_job_lost: no record.json" in out, out)
    os.rmdir(os.path.join(root, "2026-01-02_default_job_lost"))
    fj = open(os.path.join(rec, "figures.json")).read()
    os.remove(os.path.join(rec, "figures.json"))
    rc, out = tool("--check", root)
    check("a missing figures.json is named as missing", rc == 1 and "figures.json: missing" in out, out)
    open(os.path.join(rec, "figures.json"), "w").write(fj)
    # a log too large to be a record's, read by no one
    big = os.path.join(rec, "logs", "run_01.err")
    with open(big, "wb") as f:
        f.truncate(65 << 20)
    rc, out = tool("--check", root)
    check("a log larger than 64 MiB is refused unread, naming it", rc == 1 and "run_01.err: the log is larger than 64 MiB" in out
          and "Traceback" not in out, out[-500:])
    os.remove(big)
    # a page that is not UTF-8 is not rewritten (its bytes would be lost)
    page_path = os.path.join(tmp, "results", "topic", "README.md")
    raw = open(page_path, "rb").read()
    open(page_path, "wb").write(raw.replace(b"2 of 3", b"3 of 3") + b"caf\xe9\n")
    rc, out = tool("--pages", root)
    check("--pages refuses a page that is not UTF-8 and leaves its bytes as they were",
          rc == 1 and "not UTF-8" in out and open(page_path, "rb").read().endswith(b"caf\xe9\n"), out)
    open(page_path, "wb").write(raw)
    rc, out = tool("--chek")
    check("an unknown flag is refused with exit 2", rc == 2 and "unknown flag" in out, out)
    rc, out = tool("--check", root, "extra")
    check("an extra argument is refused with exit 2", rc == 2, out)
    os.remove(os.path.join(tg, "logs", "gpu-layers.rc"))
    open(os.path.join(tg, "logs", "gpu-layers.rc"), "w").write("zero\n")
    rc, out = tool("--check", root)
    check("an exit code that is not a number is refused, naming the file", rc == 1 and "gpu-layers.rc: not an exit code" in out, out)
    rc, out = tool("--check", os.path.join(tmp, "nowhere"))
    check("a folder that is not there is refused, naming it", rc == 1 and "nowhere: no such folder" in out and "Traceback" not in out, out)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

# bench_matmul records: logs/LABEL_REP.txt, each a stamped run of bench_matmul. The stamp names
# this checkout's commit, as a real record's would.
head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip() or "0123abc"
BENCH = """bench_matmul {commit} source:{source}
device: NVIDIA H100 80GB HBM3; T=65536 C=768 hidden=3072 vocab=50304 head chunk=16384

the MLP's activation inside its products (gemm/epilogue_relu2.cuh) against cuBLASLt (tuned) + relu2.cuh:
product                             apart ms   TFLOP/s   ms/step |  fused ms   TFLOP/s   ms/step | saved/step  rel diff
r = relu(h Wfc)^2                     0.67{r}7     461.1     64.39 |    0.42{r}2     727.3     40.82 |     23.57   0.0e+00
du = 2 sqrt(r) (dx Wproj^T)           0.78{r}1     394.9     75.17 |    0.53{r}7     580.5     51.14 |     24.04   0.0e+00
"""
SRC = {"old": "0a" * 32, "new": "0b" * 32}


def bench_tree(tmp):
    """A repository-shaped tree with one bench_matmul record (builds old and new, 3 repetitions
    each) and a page quoting it."""
    rec = os.path.join(tmp, "results", "records", "2026-01-01_bench_matmul_test")
    os.makedirs(os.path.join(rec, "logs"))
    json.dump({"kind": "bench_matmul", "question": "test"}, open(os.path.join(rec, "record.json"), "w"))
    open(os.path.join(rec, "command.sh"), "w").write("bench_matmul --mlp-only\n")
    for label in ("old", "new"):
        for rep in (1, 2, 3):  # repetition r's times carry r (old) or r + 3 (new) as a digit
            r = rep + (3 if label == "new" else 0)
            open(os.path.join(rec, "logs", f"{label}_{rep}.txt"), "w").write(BENCH.format(commit=head, source=SRC[label], r=r))
    os.makedirs(os.path.join(tmp, "results", "matmul"))
    open(os.path.join(tmp, "results", "matmul", "README.md"), "w").write(
        "# Matmul\n\n<!-- figures: 2026-01-01_bench_matmul_test -->\n<!-- /figures -->\n")
    return rec


tmp = tempfile.mkdtemp(prefix="records_bench_test_")
try:
    rec = bench_tree(tmp)
    root = os.path.join(tmp, "results", "records")
    rc1, out1 = tool(rec)
    rc2, out2 = tool("--pages", root)
    rc3, out3 = tool("--check", root)
    check("bench_matmul: figures written, the page's quote written, and --check passes", rc1 == rc2 == rc3 == 0, out1 + out2 + out3)
    fig = json.load(open(os.path.join(rec, "figures.json")))
    old, new = fig["labels"]["old"], fig["labels"]["new"]
    mlp = "r = relu(h Wfc)^2"
    check("bench_matmul figures: the card, each label's build, every repetition's fused and apart ms, their least and greatest",
          fig["card"] == "NVIDIA H100 80GB HBM3" and list(fig["labels"]) == ["new", "old"]
          and old["commit"] == new["commit"] == head and old["source"] == "0a" * 32 and new["source"] == "0b" * 32
          and old["repetitions"] == [1, 2, 3] and list(old["products"]) == [mlp, "du = 2 sqrt(r) (dx Wproj^T)"]
          and old["products"][mlp]["fused_ms"] == [0.4212, 0.4222, 0.4232] and old["products"][mlp]["apart_ms"] == [0.6717, 0.6727, 0.6737]
          and new["products"][mlp]["fused_ms_min"] == 0.4242 and new["products"][mlp]["fused_ms_max"] == 0.4262
          and new["products"]["du = 2 sqrt(r) (dx Wproj^T)"]["apart_ms_max"] == 0.7861, json.dumps(fig)[:1500])
    page_path = os.path.join(tmp, "results", "matmul", "README.md")
    page = open(page_path).read()
    check("the page quotes each label's fused ms range a product",
          f"| old | {head} | {mlp} | 0.4212 to 0.4232 | 3 |" in page and f"| new | {head} | du = 2 sqrt(r) (dx Wproj^T) | 0.5347 to 0.5367 | 3 |" in page,
          page)

    def caught(what, path, old, new, expect, args=("--check", root)):
        text = open(path).read()
        assert old in text, (path, old)
        open(path, "w").write(text.replace(old, new, 1))
        rc, out = tool(*args)
        open(path, "w").write(text)
        check(f"bench_matmul: {what}", rc == 1 and expect in out and "Traceback" not in out, out[-800:])

    log = os.path.join(rec, "logs", "old_2.txt")
    caught("a log edited by one digit", log, "0.4222", "0.4223", "2026-01-01_bench_matmul_test/figures.json: does not recompute")
    caught("a page's quote edited by hand", page_path, "0.4212 to", "0.4211 to", "the quoted figures of 2026-01-01_bench_matmul_test differ")
    caught("a dirty stamp is refused", log, f"bench_matmul {head} ", f"bench_matmul {head}-dirty ", "old_2.txt:1: commit")
    caught("an unknown commit is refused", log, f"bench_matmul {head} ", "bench_matmul unknown ", "is not a clean commit")
    caught("a log without its stamp is refused", log, f"bench_matmul {head} source:{'0a' * 32}\n", "",
           "old_2.txt:1: not a stamped bench_matmul log")
    caught("a malformed number is refused, naming the file and line", log, "0.4222", "0.42x2",
           f"old_2.txt:6: the fused ms of {mlp!r} '0.42x2' is not a number")
    caught("a row cut short is refused, naming the file and line", log, "    0.4222     727.3     40.82 |", "    0.4222 |",
           "old_2.txt:6: not a row of the fused-vs-apart table")
    caught("two builds under one label are refused", log, "0a" * 32, "0c" * 32, "label old's logs name 2 builds")
    caught("a repetition without one of its label's products is refused", log, "du = 2 sqrt(r)", "du = 3 sqrt(r)",
           "old_2.txt: products")
    caught("two cards in one record are refused", log, "H100 80GB HBM3", "H200", "the logs name 2 cards")
    caught("a log without a table is refused", log, "product    ", "products   ", "old_2.txt: no row of a fused-vs-apart table", args=(rec,))
    # the quoted table rewritten by --pages after a hand edit
    text = open(page_path).read()
    open(page_path, "w").write(text.replace("0.4212 to", "0.4211 to"))
    rc, out = tool("--pages", root)
    check("bench_matmul: --pages rewrites a quote edited by hand to the figures", rc == 0 and open(page_path).read() == text, out)
    for name in ("old_x.txt", "old.txt"):
        open(os.path.join(rec, "logs", name), "w").write("")
        rc, out = tool(rec)
        check(f"bench_matmul: a log not named LABEL_REP.txt ({name}) is refused", rc == 1 and f"{name}: not a log's name" in out, out)
        os.remove(os.path.join(rec, "logs", name))

    # scripts/record_bench_matmul.sh, with a stand-in for bench_matmul that prints a stamped log
    os.makedirs(os.path.join(tmp, "scripts"))
    for f in ("record_bench_matmul.sh", "record_figures.py", "tool_errors.py"):
        shutil.copy2(os.path.join(ROOT, "scripts", f), os.path.join(tmp, "scripts", f))
    shutil.copytree(os.path.join(ROOT, "scripts", "record_kinds"), os.path.join(tmp, "scripts", "record_kinds"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(tmp, "peer"))  # (a record kind reads peer/full_run_logs.py's table)
    shutil.copy2(os.path.join(ROOT, "peer", "full_run_logs.py"), os.path.join(tmp, "peer", "full_run_logs.py"))
    fake = os.path.join(tmp, "fake_bench")
    open(fake, "w").write("#!/bin/sh\necho \"$*\" >> %s.args\ncat <<'END'\n%sEND\n" % (fake, BENCH.format(commit=head, source="0d" * 32, r=5)))
    os.chmod(fake, 0o755)
    script = [os.path.join(tmp, "scripts", "record_bench_matmul.sh")]

    def record(*args):
        r = subprocess.run(script + list(args), capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout + r.stderr

    rc, out = record("2", "t1", f"a={fake}", f"b={fake}", "--", "--mlp-only")
    made = glob.glob(os.path.join(root, "*_bench_matmul_t1"))
    logs = sorted(os.listdir(os.path.join(made[0], "logs"))) if made else []
    check("record_bench_matmul.sh runs each build R times with the flags into a new record with its figures",
          rc == 0 and len(made) == 1 and logs == ["a_1.err", "a_1.txt", "a_2.err", "a_2.txt", "b_1.err", "b_1.txt", "b_2.err", "b_2.txt"]
          and open(fake + ".args").read() == "--mlp-only\n" * 4 and os.path.exists(os.path.join(made[0], "figures.json"))
          and json.load(open(os.path.join(made[0], "record.json")))["kind"] == "bench_matmul", out + str(logs))
    if made:
        before = {f: open(os.path.join(made[0], "logs", f)).read() for f in logs}
        rc, out = record("1", "t1", f"a={fake}")
        check("record_bench_matmul.sh never edits an existing record", rc == 1 and "exists" in out
              and {f: open(os.path.join(made[0], "logs", f)).read() for f in logs} == before, out)
    rc, out = record("1", "t2", "a=/bin/true")
    check("record_bench_matmul.sh stops at a log without the stamp", rc == 1 and "a_1.txt: its first line is not" in out, out)
    for args, expect in ((("0", "t3", f"a={fake}"), "R must be 1 to 100"), (("1", "t3", f"a={fake}", f"a={fake}"), "given twice"),
                         (("1", "t3", f"a_b={fake}"), "is not LABEL=BINARY"), (("1", "t 3", f"a={fake}"), "TAG must be")):
        rc, out = record(*args)
        check(f"record_bench_matmul.sh refuses {' '.join(args[:2])} ...: {expect}", rc == 2 and expect in out, out)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
finish("records")
