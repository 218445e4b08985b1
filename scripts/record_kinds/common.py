"""What every kind of result record shares: reading a record's files, its figures as numbers, and
the rules on the code a record names (its commit, and the source digest its build computed)."""
import os
import re
import subprocess

from tool_errors import ToolError, regular_file

MAX_FILE_BYTES = 64 << 20  # a record's file (a log, a page) is far smaller; a larger one is not read


def read_text(path, what="log"):
    regular_file(path, what)
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise ToolError(f"{path}: the {what} is larger than {MAX_FILE_BYTES >> 20} MiB: not a record's file")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_page(path):
    """A page's text as it is (its line ends kept), or ToolError: a page that is not UTF-8 would
    lose bytes when its quoted tables are rewritten."""
    regular_file(path, "page")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise ToolError(f"{path}: the page is larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise ToolError(f"{path}: the page is not UTF-8 (byte {e.start}): its quoted tables are not rewritten")


NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def number(text, where, name):
    """A figure of a log as a float: a plain decimal, or ToolError naming where and the figure."""
    if not NUMBER.fullmatch(text):
        raise ToolError(f"{where}: {name} {text[:40]!r} is not a number")
    return float(text)


def checked_commit(commit, where):
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit or ""):
        raise ToolError(f"{where}: commit {commit!r} is not a clean commit (unknown, or tracked files differed from it): "
                        "a record names the exact code it ran")
    return commit


# The build stamps a digest of the source tree (build/version.cpp) into every binary's first line;
# it began on this day, so a record dated up to it may name the commit alone (its pages say so),
# and a later one must name the digest.
SOURCE_DIGEST_SINCE = "2026-12-07"


def record_date(rec):
    """The date a record's folder name opens with (DATE_KIND_TAG), or ToolError."""
    m = re.match(r"(\d{4}-\d{2}-\d{2})_", os.path.basename(rec))
    if not m:
        raise ToolError(f"{rec}: not a record's name (DATE_KIND_TAG, DATE as YYYY-MM-DD)")
    return m.group(1)


def checked_source(rec, sources, where):
    """The one source digest a record's logs name, or None for a record from before the build
    computed one; ToolError where the logs name several, or a later record names none."""
    sources = set(sources)
    if len(sources) != 1:
        raise ToolError(f"{where}: the logs name {len(sources)} source digests (or some none): a record is one code")
    source = sources.pop()
    if source is None and record_date(rec) > SOURCE_DIGEST_SINCE:
        raise ToolError(f"{where}: the logs name no source digest: a record dated after {SOURCE_DIGEST_SINCE} runs a "
                        "build that stamps one")
    if source is not None and not re.fullmatch(r"[0-9a-f]{64}", source):
        raise ToolError(f"{where}: source digest {source[:70]!r} is not 64 hex digits")
    return source


def known_commit(commit, where, path):
    """commit, checked to be a clean commit and, where path (a record's file) lies in a full git clone,
    one of that clone's commits; ToolError otherwise. A shallow clone, or a folder outside git,
    checks the form alone."""
    checked_commit(commit, where)

    def git(*args):
        return subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(path)), *args], capture_output=True, text=True,
                              timeout=30)
    try:
        if git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
            return commit  # outside git, or a shallow clone
        r = git("cat-file", "-e", f"{commit}^{{commit}}")
    except (OSError, subprocess.SubprocessError):
        return commit  # no git to ask: the form was checked
    if r.returncode != 0:
        raise ToolError(f"{where}: commit {commit} is not a commit of this repository: a record names code that exists")
    return commit


def train_gpt_stamp(path, lines):
    """(run id, commit, source digest or None) of a train_gpt log's first line, 'run_id:ID train_gpt
    COMMIT' then ' source:DIGEST' where the build stamped the source tree's digest; the commit
    checked (known_commit). ToolError naming the file where the line is not that."""
    m = re.fullmatch(r"run_id:(\S+) train_gpt (\S+)(?: source:([0-9a-f]{64}))?", lines[0] if lines else "")
    if not m:
        raise ToolError(f"{path}:1: not a train_gpt log (its first line names the run, the commit and, since "
                        f"{SOURCE_DIGEST_SINCE}, the build's source digest)")
    return m.group(1), known_commit(m.group(2), f"{path}:1", path), m.group(3)


def train_gpt_card(path, text):
    """(card, GPU count) of a train_gpt log's 'train_gpt: CARD x N, ...' line, or ToolError naming the file."""
    m = re.search(r"^train_gpt: (.+?) x (\d+), ", text, re.M)
    if not m:
        raise ToolError(f"{path}: no 'train_gpt: CARD x N, ...' line (the card and the GPU count)")
    return m.group(1), int(m.group(2))


def stamp_text(fig):
    """How a page names a record's code: its commit, and where its build computed none, that its logs
    carry no source digest."""
    return f"commit {fig['commit']}" + ("" if fig.get("source") else ", no source digest: built before the build stamped one")
