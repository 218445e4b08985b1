"""How the project's Python tools end on bad input: a one-line message naming the file or flag
and exit status 1 (2 for bad flags, from argparse), never a traceback. main() functions raise
ToolError (or let OSError, ValueError and JSON errors through); run() turns them into that
message. A closed or full standard output is an error too, not a silent loss."""
import errno
import json
import os
import stat
import sys


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
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise ToolError(f"{path}: the {what} is {kind}, not a regular file")
    return path


def run(main, prog):
    """Runs main() and exits with its status; bad input ends in a message and status 1."""
    try:
        rc = main()
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
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        rc = 130
    try:
        sys.stdout.flush()
    except OSError as e:
        print(f"{prog}: error: writing the output failed: {e.strerror or e}", file=sys.stderr)
        rc = rc or 1
        sys.stdout = open(os.devnull, "w")
    sys.exit(rc)
