"""The repository's results stay in one place, and its comments carry no dated figures:

  - bench/RESULTS.md (the current figures) is at most 200 lines, every results/ path it names
    exists, and every "(bench/RESULTS.md, SECTION)" a source cites names one of its sections;
  - every repository file that README.md, bench/RESULTS.md, docs/ or a results/ README names in
    backticks exists;
  - docs/ holds prose only (no sub-folder, no run record);
  - no file names the folders results/ replaced (docs/runs, docs/mask_ablation, ...);
  - no tracked raw log (.txt, .jsonl, .log, .out, .csv, .tsv, or a dated run record) lives outside
    results/, but for the parser's fixtures in tests/fixtures/;
  - results/records/ has a README.md and each record its record.json, command.sh and figures.json;
  - every experiment in results/ has a README.md, and every file under its logs/ is named in that
    README or read by a command the README gives (a --logs-dir folder, a --group pattern; a
    .jsonl beside a log it reads);
  - no comment in the C++/CUDA sources (*.cu, *.cuh, *.h, *.cpp) holds a date, a path to a run
    record (docs/runs) or a commit hash (7 to 40 hex digits, letters and digits both).

    python3 tests/test_layout.py
"""
import fnmatch
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish, tracked_files  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Sources whose comments are being rewritten by their owner: exempt from the comment check until
# then. Remove a file from this set once its comments are clean.
COMMENT_EXEMPT = set()

# Files whose owner is rewriting them, which still name the folders results/ replaced: exempt from
# that check until then. Remove a file from this set once it is fixed.
PATH_EXEMPT = set()


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


files = tracked_files(ROOT)
check("the file list is not empty", len(files) > 50, str(len(files)))

# --- bench/RESULTS.md: short, and its pointers into results/ resolve
results_md = read("bench/RESULTS.md") if os.path.isfile(os.path.join(ROOT, "bench/RESULTS.md")) else ""
n_lines = results_md.count("\n")
check("bench/RESULTS.md exists", bool(results_md))
check("bench/RESULTS.md has at most 200 lines", n_lines <= 200, f"{n_lines} lines")
missing = sorted({p.rstrip(".,);:") for p in re.findall(r"results/[\w./-]+", results_md)
                  if not os.path.exists(os.path.join(ROOT, p.rstrip(".,);:")))})
check("every results/ path in bench/RESULTS.md exists", not missing, "\n".join(missing))

# every "bench/RESULTS.md, SECTION" a source file cites names a section of the page, and every
# "results/TOPIC/README.md[, SECTION]" a page (and section) that exists
headings = [h.strip() for h in re.findall(r"^#{2,3} (.+)$", results_md, re.M)]
cited, unknown = 0, []
page_cited, page_unknown = 0, []
for f in files:
    if not f.endswith((".cu", ".cuh", ".h", ".cpp", ".py", ".sh")) or f == "tests/test_layout.py":
        continue
    try:
        text = read(f)
    except (UnicodeDecodeError, FileNotFoundError):
        continue
    flat = re.sub(r"\n\s*(//|#)?\s*", " ", text)  # comment lines joined
    for m in re.finditer(r"bench/RESULTS\.md, ([^)]+)\)", flat):
        cited += 1
        if not any(m.group(1).strip().startswith(h) for h in headings):
            unknown.append(f"{f}: {m.group(1).strip()[:80]}")
    # every "results/TOPIC/README.md, SECTION" names a section of that page, which exists
    for m in re.finditer(r"\((?:[^()]*?[ ;])?(results/[\w./-]+\.md)(?:, ([^)]+))?\)", flat):
        page_cited += 1
        page = m.group(1)
        if not os.path.isfile(os.path.join(ROOT, page)):
            page_unknown.append(f"{f}: {page} does not exist")
            continue
        if m.group(2):
            heads = [h.strip() for h in re.findall(r"^#{1,3} (.+)$", read(page), re.M)]
            if not any(h.startswith(m.group(2).strip()) for h in heads):
                page_unknown.append(f"{f}: {page}, {m.group(2).strip()[:80]}")
check("the sources cite RESULTS.md sections", cited >= 1, str(cited))
check("every RESULTS.md section a source cites exists", not unknown, "\n".join(unknown))

check("the sources cite results/ pages", page_cited >= 10, str(page_cited))
check("every results/ page and section a source cites exists", not page_unknown, "\n".join(page_unknown))

# --- every repository file a page names in backticks exists (a page that names a file as it stood at
# an older commit writes it without backticks). Placeholders (NAME) and build or data outputs
# (build/, the git-ignored corpora) are not source paths and are skipped; results/records/ is frozen.
SOURCE_TOP = ("ablations", "attention", "bench", "common", "docs", "gemm", "hopper", "layers", "model",
              "optim", "peer", "results", "scripts", "tests", "train", "data")
FILE_EXT = re.compile(r"\.(cu|cuh|h|cpp|py|sh|md|txt|json|jsonl|csv|png|toml)$")


def named_paths(text):
    """(line, path) for each word in backticks that starts with a repository folder and ends in a
    file extension."""
    for m in re.finditer(r"`([^`\n]+)`", text):
        for word in m.group(1).split():
            path = word.strip("\"'()[],;:")
            if (path.split("/")[0] in SOURCE_TOP and FILE_EXT.search(path) and "NAME" not in path
                    and not re.search(r"[*{}$<>|=]", path)):
                yield text.count("\n", 0, m.start()) + 1, path


PAGES = ["README.md", "bench/RESULTS.md"] + sorted(
    f for f in files if f.endswith(".md") and (f.startswith("docs/") or
                                               re.fullmatch(r"results/([\w-]+/)?README\.md", f)))
bad = [f"{page}:{line}: {path}" for page in PAGES for line, path in named_paths(read(page))
       if not os.path.exists(os.path.join(ROOT, path))]
check("every repository file a page names exists", not bad, "\n".join(bad[:20]))
check("named_paths(): a path in backticks, not a placeholder or a bare word",
      list(named_paths("`gemm/x.cuh fn` `tests/layers/NAME.cu` `x.cu` `build/a.txt` `results/r/`"))
      == [(1, "gemm/x.cuh")])

# --- docs/ is prose
in_docs = [f for f in files if f.startswith("docs/")]
bad = [f for f in in_docs if f.count("/") != 1 or not f.endswith(".md")]
check("docs/ holds prose only (.md files, no sub-folders)", not bad, "\n".join(bad))

# --- nothing points into the folders that results/ replaced (raw logs keep their own words)
OLD_PATHS = re.compile(r"docs/(runs|mask_ablation|prefix_ablation|learning_gap)")
bad, exempt_clean = [], []
for f in files:
    if f.startswith(("results/", "tests/fixtures/")) and "/logs/" in f or f == "tests/test_layout.py":
        continue
    try:
        text = read(f)
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        continue
    hits = [f"{f}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in OLD_PATHS.finditer(text)]
    if f in PATH_EXEMPT:
        if not hits:
            exempt_clean.append(f)
        continue
    bad += hits
check("no file names docs/runs, docs/mask_ablation, docs/prefix_ablation or docs/learning_gap", not bad,
      "\n".join(bad[:20]))
check("every file exempt from the path check still needs it (else take it off PATH_EXEMPT)", not exempt_clean,
      "\n".join(exempt_clean))

# --- raw logs only under results/
LOG_EXT = (".txt", ".jsonl", ".log", ".out", ".csv", ".tsv")
DATED = re.compile(r"^20\d\d-\d\d-\d\d_")
bad = [f for f in files if not f.startswith(("results/", "tests/fixtures/"))
       and (f.endswith(LOG_EXT) or DATED.match(os.path.basename(f)))]
check("no raw log or run record outside results/ (but the test fixtures)", not bad, "\n".join(bad))


# --- each experiment: a README, and every log it keeps is read or named by it
def readme_commands(text):
    """The shell words of the README's code (fenced blocks and indented lines), with the
    variables it assigns (NAME=value lines) substituted."""
    code = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    code += re.findall(r"((?:^    [^\n]*\n)+)", text, re.M)
    joined = "\n".join(code).replace("\\\n", " ")
    env = dict(re.findall(r"^\s*([A-Z_][A-Z0-9_]*)=(\S+)\s*$", joined, re.M))
    for name, value in env.items():
        joined = joined.replace("${%s}" % name, value).replace("$" + name, value)
    words = []
    for line in joined.splitlines():
        try:
            words += shlex.split(line, comments=True)
        except ValueError:
            words += line.split()
    return words


# results/records/ holds dated records, checked by scripts/record_figures.py (tests/test_records.py);
# each has its command, its record.json and its figures beside its logs
records = sorted({f.split("/")[2] for f in files if f.startswith("results/records/") and f.count("/") >= 3})
check("results/records has a README.md", not records or "results/records/README.md" in files)
for rec in records:
    missing = [n for n in ("record.json", "command.sh", "figures.json") if f"results/records/{rec}/{n}" not in files]
    check(f"results/records/{rec} holds record.json, command.sh and figures.json", not missing, ", ".join(missing))
experiments = sorted({f.split("/")[1] for f in files if f.startswith("results/") and f.count("/") >= 2} - {"records"})
check("results/ holds experiments", len(experiments) >= 5, str(experiments))
for exp in experiments:
    base = f"results/{exp}"
    has_readme = f"{base}/README.md" in files
    check(f"{base} has a README.md", has_readme)
    if not has_readme:
        continue
    text = read(f"{base}/README.md")
    words = readme_commands(text)
    dirs, patterns = [], []
    for i, w in enumerate(words):
        if w == "--logs-dir" and i + 1 < len(words):
            dirs.append(os.path.normpath(words[i + 1]))
        if w == "--group" and i + 1 < len(words) and "=" in words[i + 1]:
            patterns.append(words[i + 1].split("=", 1)[1])
    logs = [f for f in files if f.startswith(base + "/") and "/logs/" in f[len(base):]]

    def read_by_command(f):
        return os.path.dirname(f) in dirs or any(fnmatch.fnmatch(f, p) for p in patterns)

    def named(f):
        rel = f[len(base) + 1:]
        return os.path.basename(f) in text or rel in text

    uncovered = []
    for f in logs:
        ok = named(f) or read_by_command(f)
        if not ok and f.endswith((".jsonl", ".json")):  # the JSON lines beside a log it reads
            stem = f.rsplit(".", 1)[0]
            ok = (stem + ".txt") in files and read_by_command(stem + ".txt")
        if not ok:
            uncovered.append(f)
    check(f"{base}: every log is named in its README or read by its command", not uncovered, "\n".join(uncovered[:20]))
    gone = [d for d in dirs if d.startswith("results/") and not os.path.isdir(os.path.join(ROOT, d))]
    check(f"{base}: the README's --logs-dir folders exist", not gone, "\n".join(gone))
    empty = [p for p in patterns if p.startswith("results/") and not any(fnmatch.fnmatch(f, p) for f in files)]
    check(f"{base}: the README's --group patterns match logs", not empty, "\n".join(empty))


# --- comments of the C++/CUDA sources
def comments(text):
    """(line, comment text) of every // and /* */ comment, string and character literals skipped."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            body = text[i + 2:j]
            for k, part in enumerate(body.split("\n")):
                out.append((line + k, part))
            line += body.count("\n")
            i = j + 2
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator, 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            line += text.count("\n", i, end if end >= 0 else n)
            i = n if end < 0 else end + 2
        else:
            i += 1
    return out


DATE = re.compile(r"20\d\d-\d\d-\d\d")
HEX = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def is_hash(token):
    return re.search(r"[a-f]", token) is not None and re.search(r"[0-9]", token) is not None


SOURCES = [f for f in files if f.endswith((".cu", ".cuh", ".h", ".cpp"))]
check("C++/CUDA sources found", len(SOURCES) > 20, str(len(SOURCES)))
bad, exempt_clean = [], []
for f in SOURCES:
    found = []
    for line, c in comments(read(f)):
        what = ([m.group(0) for m in DATE.finditer(c)] + (["docs/runs"] if "docs/runs" in c else [])
                + [m.group(0) for m in HEX.finditer(c) if is_hash(m.group(0))])
        if what:
            found.append(f"{f}:{line}: {', '.join(what)}")
    if f in COMMENT_EXEMPT:
        if not found:
            exempt_clean.append(f)
        continue
    bad += found
check("no source comment holds a date, a docs/runs path or a commit hash", not bad, "\n".join(bad[:30]))
check("every file exempt from the comment check still needs it (else take it off COMMENT_EXEMPT)",
      not exempt_clean, "\n".join(exempt_clean))

# the comment reader itself, on a known sample
sample = 'int a = 1; // ok e856b09\nconst char* s = "// 2026-11-25 not a comment";\n/* two\n lines 2026-11-25 */ int b;\n'
got = comments(sample)
check("comments(): finds // and /* */ comments, not strings", [ln for ln, _ in got] == [1, 3, 4]
      and "e856b09" in got[0][1] and "2026-11-25" in got[2][1], str(got))
check("is_hash(): a hash, not a magic number", is_hash("e856b09") and not is_hash("20240520") and not is_hash("deadbeef"))

finish("layout")
