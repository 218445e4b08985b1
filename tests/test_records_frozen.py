"""A record is never edited after it lands: every file of each record under results/records/ is, at
HEAD, what it was in the commit of the main line that first held the record (git log
--first-parent). A newer measurement is a new record. Needs a full clone; in a shallow clone or a
copy outside git there is no history to compare with, and the test says so."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Edits made before this test held records to their landing, each named with what it changed; no
# other may join them.
EDITED_BEFORE_THIS_CHECK = {
    ("2026-11-22_ab_campaign_mask-h200x2", "6cca2e6cabe3cee1879498409a2d8d90c5cbbeb3"):
        "record.json (and so figures.json) and command.sh reworded before the record first passed CI",
    ("2026-11-22_ab_campaign_mask-noncausal-h200", "6cca2e6cabe3cee1879498409a2d8d90c5cbbeb3"):
        "record.json (and so figures.json) and command.sh reworded before the record first passed CI",
    ("2026-11-27_peer_compare_h100", "6cca2e6cabe3cee1879498409a2d8d90c5cbbeb3"):
        "record.json (and so figures.json) and command.sh reworded before the record first passed CI",
    ("2026-11-27_peer_compare_h200x2", "6cca2e6cabe3cee1879498409a2d8d90c5cbbeb3"):
        "record.json (and so figures.json) and command.sh reworded before the record first passed CI",
    ("2026-11-28_peer_compare_h100x4", "6cca2e6cabe3cee1879498409a2d8d90c5cbbeb3"):
        "record.json (and so figures.json) and command.sh reworded before the record first passed CI",
    ("2026-11-28_peer_full_run_h100x4", "6cca2e6cabe3cee1879498409a2d8d90c5cbbeb3"):
        "record.json (and so figures.json) and command.sh reworded before the record first passed CI",
    ("2026-12-07_test_gpu_h100", "5d55330c4a22b0b7090b6b77caa28d9dea77e9ab"):
        "command.sh: one comment line reworded; the commands and logs unchanged",
    ("2026-11-22_ab_campaign_mask-h200x2", "ee811329f55598dc08d3a8d4877f6141fa27dc55"):
        "command.sh corrected before the record first passed CI",
    ("2026-11-22_ab_campaign_mask-noncausal-h200", "ee811329f55598dc08d3a8d4877f6141fa27dc55"):
        "command.sh corrected before the record first passed CI",
    ("2026-11-25_compare_flex_h200", "ee811329f55598dc08d3a8d4877f6141fa27dc55"):
        "command.sh corrected before the record first passed CI",
    ("2026-11-28_scaling_h100x4", "ee811329f55598dc08d3a8d4877f6141fa27dc55"):
        "command.sh corrected before the record first passed CI",
    ("2026-11-28_scaling_h200x4-3972ac1", "ee811329f55598dc08d3a8d4877f6141fa27dc55"):
        "command.sh corrected before the record first passed CI",
    ("2026-11-28_scaling_h200x4-d0bfb4d", "ee811329f55598dc08d3a8d4877f6141fa27dc55"):
        "command.sh corrected before the record first passed CI",
}


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=120)


def edited_after_landing(path):
    """None where the record at path is as it landed, else the commits of the main line that
    changed it after, as 'landed LANDING, changed since by C1 C2 ...'."""
    commits = git("log", "--first-parent", "--format=%H", "--", path).stdout.split()  # newest first
    if len(commits) < 2:
        return None
    landing = commits[-1]
    if git("diff", "--quiet", landing, "HEAD", "--", path).returncode == 0:
        return None
    name = os.path.basename(path)
    if all((name, c) in EDITED_BEFORE_THIS_CHECK for c in commits[:-1]):
        return None
    return f"landed in {landing}, changed since by {' '.join(reversed(commits[:-1]))}"


shallow = git("rev-parse", "--is-shallow-repository").stdout.strip()
if shallow != "false":
    print("records-frozen: not a full git clone: no history to check records against (skipped)")
else:
    records = sorted(d for d in os.listdir(os.path.join(ROOT, "results", "records"))
                     if os.path.isdir(os.path.join(ROOT, "results", "records", d)))
    bad = [f"{r}: {why}" for r in records if (why := edited_after_landing(os.path.join("results", "records", r)))]
    check(f"the {len(records)} records are as they landed on the main line", records and not bad, "\n".join(bad))
    # the rule catches an edit: a record's file changed in the work tree against the landing commit
    if records:
        probe = os.path.join(ROOT, "results", "records", records[0], "record.json")
        text = open(probe).read()
        try:
            open(probe, "w").write(text + " ")
            commits = git("log", "--first-parent", "--format=%h", "--", probe).stdout.split()
            changed = git("diff", "--quiet", commits[-1], "--", probe).returncode != 0
        finally:
            open(probe, "w").write(text)
        check("an edit of a record's file is seen against its landing commit", changed)

finish("records-frozen")
