"""The repository stands alone: a clone with nothing beside it has everything the tests and the
default job need, and nothing in it reads a path outside it.

  - no tracked file names the team's shared folder or a spec that is not in the repository;
  - the GPT-2 vocabulary files are shipped with their license line, and their SHA-256 sums are
    the ones data/gpt2/README.md and the tokenizer expect;
  - the record logs used as parser fixtures are shipped with their license line;
  - .ci/run runs exactly the README's test command, in a temporary clone.

    python3 tests/test_standalone.py
"""
import hashlib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, tracked_files  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


files = tracked_files(ROOT)
check("the file list is not empty", len(files) > 50, str(len(files)))
# the vocabulary files are data (they hold every byte sequence, "shared" and "SPEC" included)
DATA = {"data/gpt2/encoder.json", "data/gpt2/vocab.bpe"}
FORBIDDEN = [(re.compile(r"\.\./shared"), "the shared folder beside the clone"),
             (re.compile(r"shared/data/"), "the shared data folder"),
             (re.compile(r"\bSPEC(\.md)?\b"), "a spec that is not in the repository")]
bad = []
for f in files:
    if f in DATA or f == "tests/test_standalone.py":
        continue
    try:
        text = open(os.path.join(ROOT, f), encoding="utf-8").read()
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        continue  # binary files (plots)
    for rx, what in FORBIDDEN:
        for m in rx.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{f}:{line}: {what}")
check("no tracked file reads or cites anything outside the repository", not bad, "\n".join(bad[:20]))

# the GPT-2 files, their sums as the README gives them, and as the tokenizer expects them
readme = open(os.path.join(ROOT, "data/gpt2/README.md")).read()
tok = open(os.path.join(ROOT, "data/tokenizer.cpp")).read()
check("data/gpt2/README.md carries the license line", "MIT license" in readme and "OpenAI" in readme)
for name in ("encoder.json", "vocab.bpe"):
    path = os.path.join(ROOT, "data/gpt2", name)
    ok = os.path.isfile(path)
    check(f"data/gpt2/{name} is shipped", ok)
    if ok:
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        check(f"data/gpt2/{name}: SHA-256 is the README's", f"| {name} | {os.path.getsize(path)} | {digest} |" in readme, digest)
        check(f"data/gpt2/{name}: SHA-256 is the one the tokenizer checks", digest in tok, digest)

logs = os.path.join(ROOT, "tests/fixtures/record_logs")
names = sorted(os.listdir(logs)) if os.path.isdir(logs) else []
check("record logs of both formats shipped", sum(n.startswith("2024-11-24_") for n in names) >= 2 and
      sum(n.startswith("2024-12-10_") for n in names) >= 2, str(names))
check("the record logs hold their license line", "MIT" in open(os.path.join(logs, "README.md")).read() if names else False)

# .ci/run: the README's test command, in a temporary clone
readme_top = open(os.path.join(ROOT, "README.md")).read()
m = re.search(r"# 2\. the tests[^\n]*\n([^\n]+)\n", readme_top)
cmd = m.group(1).strip() if m else None
ci = open(os.path.join(ROOT, ".ci/run")).read()
check("the README's second command is the test command", cmd is not None and "make" in cmd and "test" in cmd, str(cmd))
check(".ci/run runs exactly that command", cmd is not None and ci.rstrip().splitlines()[-1].strip() == cmd, ci)
check(".ci/run runs it in a temporary clone", "git clone" in ci and "mktemp -d" in ci)
finish("standalone")
