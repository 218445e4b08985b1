"""How the project's Python tools end on bad input: a one-line message naming the file or flag
and exit status 1 (2 for bad flags, from argparse), never a traceback. main() functions raise
ToolError (or let OSError, ValueError and JSON errors through); run() turns them into that
message. A closed or full standard output is an error too, not a silent loss.

read_json(), read_json_lines(), read_toml(), record() and field() are the one way a tool reads
numbers and records from a file: each value is checked for its declared type (a number is a JSON number, never
text or true/false), finiteness and range, and a refusal names the file (and line) and the field.
within() is a tolerance check that a NaN fails.

require() comes before the imports a tool needs beyond the standard library: where the running
python3 lacks one (another python3 first on PATH: pyenv, conda, a venv), the tool ends with one
line naming the module and how to get it, not an import traceback. This module itself needs
nothing outside the standard library."""
import errno
import json
import math
import os
import signal
import stat
import subprocess
import sys

# how to get each module the project's tools import; Debian's packages are what scripts/setup.sh
# installs, PyTorch is for the GPU machine
INSTALL = {
    "numpy": "apt-get install python3-numpy",
    "scipy": "apt-get install python3-scipy",
    "statsmodels": "apt-get install python3-statsmodels",
    "matplotlib": "apt-get install python3-matplotlib",
    "regex": "apt-get install python3-regex",
    "tomlkit": "apt-get install python3-tomlkit",
    "torch": "pip install torch (PyTorch 2.5 or newer, with CUDA)",
    "tiktoken": "pip install tiktoken",
}
# an interpreter that scripts/setup.sh provisions with the Debian packages above
PROVISIONED = "/usr/bin/python3"


class ToolError(Exception):
    """A message for the user: what is wrong, naming the file or flag."""


def regular_file(path, what="file"):
    """Raises ToolError unless path is a regular file (a FIFO would hang the reader; a directory
    would read as nothing)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ToolError(f"{path}: no such {what}")
    except OSError as e:
        raise ToolError(f"{path}: cannot read the {what}: {e.strerror}")
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else None
        raise ToolError(f"{path}: the {what} is " + (f"{kind}, not a regular file" if kind else "not a regular file (a device or socket)"))
    return path


def _missing(modules):
    """(module, why) for each module that does not import here."""
    out = []
    for m in modules:
        try:
            __import__(m)
        except ImportError as e:  # not installed, or installed for another python
            out.append((m, str(e)))
    return out


def _provisioned_has(modules):
    """Whether the provisioned interpreter (when it is not this one) imports every module."""
    try:
        if not os.path.isfile(PROVISIONED) or os.path.realpath(PROVISIONED) == os.path.realpath(sys.executable):
            return False
        r = subprocess.run([PROVISIONED, "-c", "import " + ", ".join(modules)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def require(*modules, prog=None, suite=None):
    """Returns when every module imports; else prints one line (the missing modules, the python
    that lacks them, how to install them or which python has them) and exits with status 1. A
    test passes suite: its result line 'SUITE: 0 passed, 1 failed' follows, so that a test run
    counts it as failed rather than passed or crashed."""
    missing = _missing(modules)
    if not missing:
        return
    prog = prog or suite or os.path.splitext(os.path.basename(sys.argv[0] or "python3"))[0]
    names = [m for m, _ in missing]
    what = "PyTorch (the module torch)" if names == ["torch"] else "the Python module" + ("s " if len(names) > 1 else " ") + \
        ", ".join(names)
    hows = []
    if _provisioned_has(modules):
        hows.append(f"run it with {PROVISIONED} (which has {', '.join(modules)})")
    apt = [INSTALL[m].split()[-1] for m in names if INSTALL.get(m, "").startswith("apt-get")]
    if apt:
        hows.append("install: apt-get install " + " ".join(apt) + " (scripts/setup.sh does)")
    hows += [f"install: {INSTALL[m]}" for m in names if m in INSTALL and not INSTALL[m].startswith("apt-get")]
    hows += [f"install the Python module {m}" for m in names if m not in INSTALL]
    print(f"{prog}: error: needs {what}, which {sys.executable} lacks ({missing[0][1]}); " + "; or ".join(hows),
          file=sys.stderr, flush=True)
    if suite:
        print(f"{suite}: 0 passed, 1 failed", flush=True)
    sys.exit(1)


class _KeyTwice(Exception):
    pass


def _unique_keys(pairs):
    """An object's dict, or _KeyTwice: json.loads would keep the last of two values of one key
    without a word, and a record or log line whose key is given twice holds two answers."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _KeyTwice(k)
            seen.add(k)
    return out


def load_json(text, where):
    """json.loads, with a message naming `where` for bad JSON, for an object that gives one key
    twice, and for JSON nested too deeply for the parser (which would otherwise end in a
    RecursionError)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _KeyTwice as e:
        raise ToolError(f"{where}: the key {_shown(e.args[0])} twice in one object: which value holds?")
    except json.JSONDecodeError as e:
        raise ToolError(f"{where}: not JSON ({e})")
    except RecursionError:
        raise ToolError(f"{where}: JSON nested too deeply to read")
    except ValueError as e:  # a whole number of more digits than Python converts
        raise ToolError(f"{where}: not JSON that can be read ({e})")


MAX_JSON_BYTES = 64 << 20  # a tool's JSON file (a record, a benchmark's output) is far smaller
_REQUIRED = object()
_KINDS = {int: "a whole number", float: "a number", str: "text", list: "a list", dict: "an object", bool: "true or false"}


def _shown(v):
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 100:
        return f"a {'negative ' if v < 0 else ''}whole number of about {int(v.bit_length() * 0.30103)} digits"
    text = json.dumps(v) if isinstance(v, (str, bool)) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is(v, kind):
    """Whether a JSON value is of the kind: a bool is no number, an int is a float, text is text only."""
    if kind is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind is int:
        return isinstance(v, int) and not isinstance(v, bool)
    return isinstance(v, kind)


def checked(v, where, name, kind=float, lo=None, hi=None, above=None, choices=None):
    """v as the declared kind, or ToolError naming where and name. A number must be finite and in
    [lo, hi] (both stated: every number read has a bound) and above `above` when given (a divisor:
    above=0); an int comes back as int, a float as float."""
    if not _is(v, kind):
        what = "text" if isinstance(v, str) else "true/false" if isinstance(v, bool) else "null" if v is None else \
            _KINDS.get(type(v), type(v).__name__)
        raise ToolError(f"{where}: {name} is {what}" + ("" if v is None else f" ({_shown(v)})") + f", not {_KINDS[kind]}")
    if kind in (int, float):
        if lo is None or hi is None:
            raise TypeError(f"checked({name}): a number needs its bounds lo and hi")
        if isinstance(v, float) and not math.isfinite(v):
            raise ToolError(f"{where}: {name} is {v}, not a finite number")
        if not lo <= v <= hi or (above is not None and not v > above):
            low = f"above {above:g}" if above is not None else f"at least {lo:g}"
            raise ToolError(f"{where}: {name} is {_shown(v)}: want {low} and at most {hi:g}")
        return float(v) if kind is float else v
    if choices is not None and v not in choices:
        raise ToolError(f"{where}: {name} is {_shown(v)}, not one of {', '.join(map(str, choices))}")
    return v


def field(obj, name, where, kind=float, lo=None, hi=None, above=None, choices=None, default=_REQUIRED):
    """obj[name] checked as checked() does; a missing field is refused unless a default is given
    (returned as it is). obj must be a JSON object (record() checks one)."""
    if name not in obj:
        if default is _REQUIRED:
            raise ToolError(f"{where}: no field {name}")
        return default
    return checked(obj[name], where, name, kind, lo, hi, above, choices)


def record(v, where, what="a JSON object"):
    """v when it is a JSON object, else ToolError naming where."""
    if not isinstance(v, dict):
        raise ToolError(f"{where}: {_KINDS.get(type(v), type(v).__name__)}, not {what}")
    return v


def read_json(path, what="JSON file", limit=MAX_JSON_BYTES):
    """The JSON value of a regular file of at most `limit` bytes, or ToolError naming the file."""
    regular_file(path, what)
    if os.path.getsize(path) > limit:
        raise ToolError(f"{path}: the {what} is larger than {limit >> 20} MiB")
    with open(path, encoding="utf-8", errors="replace") as f:
        return load_json(f.read(), path)


MAX_TOML_BYTES = 1 << 20  # a recipe or a campaign file of removals is a few KB


def parse_toml(text, where, what="TOML file"):
    """tomllib.loads, with a message naming `where` for text that is not TOML and for TOML nested
    too deeply for the parser (which would otherwise end in a RecursionError)."""
    import tomllib  # (only the tools that read TOML need it)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ToolError(f"{where}: not a TOML file: {e}")
    except RecursionError:
        raise ToolError(f"{where}: TOML nested too deeply to read, not a {what}")


def read_toml(path, what="TOML file", limit=MAX_TOML_BYTES):
    """The table of a TOML file, or ToolError naming the file: not a regular file (a FIFO would
    hang the read), larger than `limit` bytes, not UTF-8, not TOML, or nested too deeply."""
    regular_file(path, what)
    if os.path.getsize(path) > limit:
        raise ToolError(f"{path}: the {what} is larger than {limit >> 20} MiB")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{path}: not UTF-8 text (byte {e.start}), not a {what}")
    return parse_toml(text, path, what)


def read_json_lines(path, what="JSON-lines file", max_line=1 << 20):
    """(where, value) for each non-blank line of a regular file, where is PATH:LINE; a line
    longer than max_line characters is refused unread."""
    regular_file(path, what)
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line, too_long in bounded_lines(f, max_line):
            if too_long:
                raise ToolError(f"{path}:{n}: a line longer than {max_line} characters: not a {what}")
            if line.strip():
                yield f"{path}:{n}", load_json(line, f"{path}:{n}")


def bounded_lines(f, limit):
    """(line number, line, too long) for each line of f; a line longer than limit is not read
    whole: its first 64 characters come back, and too long is True."""
    lineno = 0
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        lineno += 1
        if len(line) > limit and not line.endswith("\n"):
            head = line[:64]
            while line and not line.endswith("\n"):
                line = f.readline(limit)
            yield lineno, head, True
        else:
            yield lineno, line, False


def within(x, tol):
    """abs(x) <= tol, false for a NaN (where `abs(x) > tol` would call a NaN within tolerance)."""
    return math.isfinite(x) and abs(x) <= tol


class Stopped(BaseException):
    """SIGTERM or SIGHUP, raised where the program is so that its cleanup runs as for Ctrl-C."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame):
    raise Stopped(signum)


def run(main, prog):
    """Runs main() and exits with its status; bad input ends in a message and status 1. SIGTERM
    and SIGHUP end it as Ctrl-C does, through the program's cleanup, with status 128 + the
    signal."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # (nohup's ignored SIGHUP stays ignored)
            signal.signal(sig, _stop)
    try:
        rc = main()
        if sys.stdout is not None:
            sys.stdout.flush()
    except ToolError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        rc = 1
    except json.JSONDecodeError as e:
        print(f"{prog}: error: bad JSON: {e}", file=sys.stderr)
        rc = 1
    except BrokenPipeError:
        rc = 1
        try:
            sys.stdout = open(os.devnull, "w")  # nothing more can be written there
        except OSError:
            pass
    except OSError as e:
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        what = "disk full: " if e.errno == errno.ENOSPC else ""
        print(f"{prog}: error: {where}{what}{e.strerror or e}", file=sys.stderr)
        rc = 1
    except (ValueError, UnicodeDecodeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        rc = 1
    except RecursionError:  # JSON nested too deeply, read somewhere that did not name its file
        print(f"{prog}: error: input nested too deeply to read", file=sys.stderr)
        rc = 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        rc = 130
    except Stopped as e:
        print(f"{prog}: stopped by {signal.Signals(e.signum).name}", file=sys.stderr)
        rc = 128 + e.signum
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as e:
        print(f"{prog}: error: writing the output failed: {e.strerror or e}", file=sys.stderr)
        rc = rc or 1
        sys.stdout = open(os.devnull, "w")
    sys.exit(rc)
