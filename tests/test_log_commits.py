"""Every log under results/ names the code it ran: a train_gpt log's first line, or a JSON-lines log's
configuration, names a clean commit of this repository (7 to 40 hex digits; in a full clone, one
that git holds). A log that names another (empty, "-dirty", set by hand, or one no commit holds)
is allowed only where it is said: in a record, by its record.json's "provenance"; elsewhere, by its
folder's README, which quotes the commit as the log writes it, in backticks."""
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=60)


full_clone = os.path.exists(os.path.join(ROOT, ".git")) and git("rev-parse", "--is-shallow-repository").stdout.strip() == "false"
known = {}


def clean(commit):
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        return False
    if full_clone and commit not in known:
        known[commit] = git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0
    return known.get(commit, True)


def commit_of(path):
    """The commit a log names, or None for a file that is not a run's log."""
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    m = re.match(r"run_id:\S+ train_gpt (\S+)", first)
    if m:
        return m.group(1)
    if path.endswith(".jsonl"):
        try:
            head = json.loads(first)
        except ValueError:
            return None
        if isinstance(head, dict):
            config = head.get("config") if isinstance(head.get("config"), dict) else head
            if "git_commit" in config:
                return str(config["git_commit"])
    return None


def said(path, commit):
    """Whether the place that answers for a log says that it names this commit."""
    rel = os.path.relpath(path, ROOT).split(os.sep)
    if rel[:2] == ["results", "records"] and len(rel) > 3:
        meta_path = os.path.join(ROOT, *rel[:3], "record.json")
        try:
            meta = json.load(open(meta_path))
        except (OSError, ValueError):
            return False
        return isinstance(meta, dict) and bool(meta.get("provenance"))
    readme = os.path.join(ROOT, *rel[:2], "README.md")
    return commit != "" and os.path.isfile(readme) and f"`{commit}`" in open(readme, encoding="utf-8").read()


logs = unsaid = 0
problems = []
for path in sorted(glob.glob(os.path.join(ROOT, "results", "**", "*"), recursive=True)):
    if not os.path.isfile(path) or not path.endswith((".txt", ".jsonl", ".log")):
        continue
    commit = commit_of(path)
    if commit is None:
        continue
    logs += 1
    if not clean(commit) and not said(path, commit):
        problems.append(f"{os.path.relpath(path, ROOT)}: commit {commit!r}")
check(f"the {logs} run logs under results/ name clean commits of the repository, or say why not where they are kept",
      logs > 100 and not problems, "\n".join(problems[:30]))

# the rule itself: a log with a dirty commit in a topic folder whose README does not quote it is caught
check("a '-dirty' commit is not clean", not clean("fcc6a30-dirty"))
check("an empty commit is not clean, and no README can excuse it", not clean("") and not said(os.path.join(ROOT, "results", "x", "a.txt"), ""))
check("a hash that no commit holds is not clean in a full clone", not full_clone or not clean("0123abc"))
check("a commit of the repository is clean", clean(git("rev-parse", "--short", "HEAD").stdout.strip() or "0123abc"))

finish("log-commits")
