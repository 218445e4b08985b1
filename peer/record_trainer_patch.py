#!/usr/bin/env python3
"""Reads and patches a modded-nanogpt record trainer (its train_gpt.py, or a record's log, whose
top holds the trainer's code above a line of 100 '='), for peer/record_trainer.sh. The trainer's
code is never part of this repository: the user names a file of their own copy of
modded-nanogpt, and the patched copy is written outside the repository.

    python3 peer/record_trainer_patch.py fields TRAINER
    python3 peer/record_trainer_patch.py patch TRAINER ORIGINAL PATCHED [--steps N] [--val-every N]
        [--val-tokens N] [--seed N] [--train GLOB] [--val GLOB] [--field NAME=VALUE ...]

fields: the fields of the trainer's class Hyperparameters (line and value) and which of them each
setting patches; a setting the trainer has no field for is named (the records of 2024-12-10 and
2025-08-23 have no seed: their runs are not seeded).
patch: writes the trainer's code as it is to ORIGINAL and the patched code to PATCHED (neither may
exist), and prints the unified diff between them. Each setting replaces the value of one field of
class Hyperparameters, keeping its annotation and comment:

    --steps       num_iterations         --train   input_bin (2024) or train_files (2025)
    --val-every   val_loss_every         --val     input_val_bin (2024) or val_files (2025)
    --val-tokens  val_tokens             --seed    seed
    --field NAME=VALUE  the field NAME, VALUE being a Python literal (a number, a quoted string)

A patch is made only where it takes effect: the field must be assigned exactly once in the class
(refused, naming the field, when it is missing or assigned twice); no other line may set it
(`args.NAME = ...` or `Hyperparameters(NAME=...)`) unless that line reads the field itself (the
2025 trainers' `args.train_files = os.path.join(data_path, args.train_files)`, which keeps an
absolute glob as it is). The patched code is parsed again and each patched field must hold its
new value, every other field its old one, and the diff must touch only the patched lines.
Exit status: 0, 1 for a trainer that cannot be read or patched, 2 for bad flags.
"""
import argparse
import ast
import difflib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import ToolError, regular_file, run  # noqa: E402

SEPARATOR = "=" * 100          # the line the record trainers write after their code in the log
MAX_BYTES = 64 << 20           # a record's log is under 1 MiB; a larger file is no trainer
CLASS = "Hyperparameters"
# setting: (flag, the field names the records use for it, the value's kind)
SETTINGS = {
    "steps": ("--steps", ("num_iterations",), int),
    "val_every": ("--val-every", ("val_loss_every",), int),
    "val_tokens": ("--val-tokens", ("val_tokens",), int),
    "seed": ("--seed", ("seed",), int),
    "train": ("--train", ("input_bin", "train_files"), str),
    "val": ("--val", ("input_val_bin", "val_files"), str),
}


class FlagError(ToolError):
    """A flag that does not fit the trainer: exit 2."""


def parse_python(text, where):
    """The module's syntax tree, or ToolError naming where (and the line of a syntax error)."""
    try:
        return ast.parse(text)
    except SyntaxError as e:
        raise ToolError(f"{where}: line {e.lineno}: {e.msg}: not Python that parses") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise ToolError(f"{where}: not Python that parses ({type(e).__name__})") from None


def trainer_code(path):
    """(code, where it came from): the file itself when it is Python, else the code above the first
    line of 100 '=' (a record's log; the trainer printed its code and a newline there, so that one
    newline is dropped and the code comes back byte for byte)."""
    regular_file(path, "trainer")
    if os.path.getsize(path) > MAX_BYTES:
        raise ToolError(f"{path}: larger than {MAX_BYTES >> 20} MiB: not a trainer or a record's log")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{path}: not UTF-8 text (byte {e.start}): not a trainer or a record's log") from None
    try:
        tree = ast.parse(text)
        return text, tree, "the file"
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    lines = text.splitlines(keepends=True)
    cut = next((i for i, line in enumerate(lines) if line.rstrip("\r\n") == SEPARATOR), None)
    if cut is None:
        parse_python(text, path)  # names the syntax error of a file that is meant as Python
        raise ToolError(f"{path}: neither Python nor a record's log with its code above a line of 100 '='")
    code = "".join(lines[:cut])
    if not code.strip():
        raise ToolError(f"{path}: nothing above the line of 100 '=' (line {cut + 1}): not a record's log with its code")
    code = code[:-1] if code.endswith("\n") else code
    tree = parse_python(code, f"{path} (the code above line {cut + 1}, its line of 100 '=')")
    return code, tree, f"its code, lines 1-{cut}"


def hyper_class(tree, where):
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS]
    if len(classes) != 1:
        raise ToolError(f"{where}: {len(classes)} classes named {CLASS} at the top level, want exactly 1")
    return classes[0]


def class_fields(cls):
    """{name: [assignment node, ...]} for the names the class body assigns (name = v, name: T = v)."""
    out = {}
    for node in cls.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    out.setdefault(n.id, []).append(node)
    return out


def reads_field(expr, name):
    return any(isinstance(n, ast.Attribute) and n.attr == name and isinstance(n.ctx, ast.Load) for n in ast.walk(expr))


def overrides(tree, cls, name):
    """Lines outside the class that set the field and do not read it (which would undo a patch)."""
    inside = {id(n) for n in ast.walk(cls)}
    found = []
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Attribute) and n.attr == name and isinstance(n.ctx, ast.Store) and \
                            (isinstance(node, ast.AugAssign) or node.value is None or not reads_field(node.value, name)):
                        found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CLASS:
            if any(k.arg == name for k in node.keywords):
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and \
                len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == name:
            found.append(node.lineno)
    return sorted(set(found))


def literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


def segment(code, node):
    s = ast.get_source_segment(code, node) or ""
    return " ".join(s.split())[:80]


def field_report(code, tree, where):
    """The lines of `fields`: each field of the class, then the field each setting patches."""
    cls = hyper_class(tree, where)
    fields = class_fields(cls)
    out = [f"{where}: class {CLASS} (line {cls.lineno}), {len(fields)} fields:"]
    for name, nodes in fields.items():
        vals = "; ".join(f"line {n.lineno}: {segment(code, n.value) if getattr(n, 'value', None) else '(no value)'}" for n in nodes)
        out.append(f"  {name:<20} {vals}")
    out.append("settings:")
    for key, (flag, names, _) in SETTINGS.items():
        have = [n for n in names if n in fields]
        if not have:
            what = "no field: this trainer takes no seed (its runs are not seeded)" if key == "seed" else \
                f"no field ({' or '.join(names)})"
            out.append(f"  {flag:<12} {what}")
        else:
            out.append(f"  {flag:<12} {', '.join(have)}")
    return out


def to_patch(args, fields, where):
    """[(field name, flag, new value)] for the flags given, each naming exactly one field."""
    todo = []
    for key, (flag, names, _) in SETTINGS.items():
        value = getattr(args, key)
        if value is None:
            continue
        have = [n for n in names if n in fields]
        if not have:
            if key == "seed":
                raise FlagError(f"{flag}: {where}: class {CLASS} has no field seed: this trainer takes no seed "
                                "(its runs are not seeded); leave out --seed")
            raise FlagError(f"{flag}: {where}: class {CLASS} has no field {' or '.join(names)}")
        if len(have) > 1:
            raise FlagError(f"{flag}: {where}: class {CLASS} has both {' and '.join(have)}: which one {flag} sets is unclear")
        todo.append((have[0], flag, value))
    for spec in args.field or []:
        name, sep, text = spec.partition("=")
        if not sep or not name.isidentifier():
            raise FlagError(f"--field {spec!r}: want NAME=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            raise FlagError(f"--field {name}: {text[:40]!r} is not a Python literal (a number, a quoted string, "
                            "True, False)") from None
        if name not in fields:
            raise FlagError(f"--field {name}: {where}: class {CLASS} has no field {name}")
        todo.append((name, f"--field {name}", value))
    seen = {}
    for name, flag, _ in todo:
        if name in seen:
            raise FlagError(f"{flag}: the field {name} is set by {seen[name]} too")
        seen[name] = flag
    return todo


def patch(code, tree, where, todo):
    """The patched code: each field's value expression replaced by the new value's repr."""
    cls = hyper_class(tree, where)
    fields = class_fields(cls)
    edits = []
    for name, flag, value in todo:
        nodes = fields.get(name, [])
        if len(nodes) != 1:
            lines = ", ".join(str(n.lineno) for n in nodes)
            raise ToolError(f"{where}: {flag}: the field {name} is assigned {len(nodes)} times in class {CLASS}"
                            + (f" (lines {lines})" if nodes else "") + ", want exactly 1: not patched")
        node = nodes[0]
        if getattr(node, "value", None) is None:
            raise ToolError(f"{where}: {flag}: the field {name} (line {node.lineno}) has no value to replace: not patched")
        if isinstance(node, ast.Assign) and not (len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise ToolError(f"{where}: {flag}: the field {name} (line {node.lineno}) is assigned with others in one "
                            "statement: not patched")
        if node.value.end_lineno != node.value.lineno:
            raise ToolError(f"{where}: {flag}: the value of the field {name} spans lines {node.value.lineno}-"
                            f"{node.value.end_lineno}: not patched")
        bad = overrides(tree, cls, name)
        if bad:
            raise ToolError(f"{where}: {flag}: line {', '.join(map(str, bad))} sets {name} outside class {CLASS}, "
                            "which would undo the patch: not patched")
        edits.append((node.value, repr(value)))
    # ast's columns count UTF-8 bytes: edit the bytes, last edit first
    raw = code.encode("utf-8")
    starts, pos = [], 0
    for line in raw.splitlines(keepends=True):
        starts.append(pos)
        pos += len(line)
    starts.append(pos)
    spans = sorted(((starts[v.lineno - 1] + v.col_offset, starts[v.end_lineno - 1] + v.end_col_offset, text)
                    for v, text in edits), reverse=True)
    for a, b, text in spans:
        raw = raw[:a] + text.encode("utf-8") + raw[b:]
    return raw.decode("utf-8")


def verify(code, patched, where, todo):
    """Refuses (ToolError) patched code that does not compile, whose patched fields do not hold
    their new values or whose other fields changed, or whose diff touches other lines."""
    try:
        compile(patched, "train_gpt.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ToolError(f"{where}: the patched code does not compile ({e}): not written") from None
    before = class_fields(hyper_class(ast.parse(code), where))
    after = class_fields(hyper_class(ast.parse(patched), where))
    want = {name: value for name, _, value in todo}
    if set(before) != set(after):
        raise ToolError(f"{where}: the patch changed the fields of class {CLASS}: not written")
    for name, nodes in after.items():
        if name in want:
            got = literal(nodes[0].value)
            if got != want[name] or type(got) is not type(want[name]):
                raise ToolError(f"{where}: the patched field {name} reads {got!r}, not {want[name]!r}: not written")
        elif [ast.dump(n) for n in nodes] != [ast.dump(n) for n in before[name]]:
            raise ToolError(f"{where}: the patch changed the field {name}, which no flag names: not written")
    lines = {nodes[0].lineno for name, nodes in after.items() if name in want}
    a, b = code.splitlines(), patched.splitlines()
    if len(a) != len(b):
        raise ToolError(f"{where}: the patch changed the number of lines: not written")
    other = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y and i + 1 not in lines]
    if other:
        raise ToolError(f"{where}: the patch changed line {other[0]}, which holds no patched field: not written")


def write_new(path, text):
    try:
        with open(path, "x", encoding="utf-8", newline="") as f:
            f.write(text)
    except FileExistsError:
        raise ToolError(f"{path}: exists already: not overwritten") from None


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"record_trainer_patch: error: {message}", file=sys.stderr)
        sys.exit(2)


def whole(lo, hi):
    def parse(text):
        if not (text.isdigit() and len(text) <= 19 and lo <= int(text) <= hi):
            raise argparse.ArgumentTypeError(f"want a whole number from {lo} to {hi}, got {text!r}")
        return int(text)
    return parse


def glob_text(text):
    if not text or "\n" in text or "\0" in text:
        raise argparse.ArgumentTypeError("want a file pattern on one line")
    return text


def main(argv):
    p = Parser(prog="record_trainer_patch.py", description="Reads and patches a record trainer's Hyperparameters.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    f = sub.add_parser("fields", help="the trainer's Hyperparameters fields and the field each setting patches")
    f.add_argument("trainer")
    q = sub.add_parser("patch", help="write the code as it is and patched, print the diff")
    q.add_argument("trainer")
    q.add_argument("original")
    q.add_argument("patched")
    q.add_argument("--steps", type=whole(1, 10 ** 7))
    q.add_argument("--val-every", type=whole(0, 10 ** 7))
    q.add_argument("--val-tokens", type=whole(1, 10 ** 13))
    q.add_argument("--seed", type=whole(0, 2 ** 63 - 1))
    q.add_argument("--train", type=glob_text)
    q.add_argument("--val", type=glob_text)
    q.add_argument("--field", action="append", metavar="NAME=VALUE")
    args = p.parse_args(argv)
    code, tree, part = trainer_code(args.trainer)
    where = args.trainer if part == "the file" else f"{args.trainer} ({part})"
    if args.cmd == "fields":
        print("\n".join(field_report(code, tree, where)))
        return 0
    fields = class_fields(hyper_class(tree, where))
    try:
        todo = to_patch(args, fields, where)
    except FlagError as e:
        print(f"record_trainer_patch: error: {e}", file=sys.stderr)
        return 2
    if not todo:
        print("record_trainer_patch: error: no setting given: nothing to patch", file=sys.stderr)
        return 2
    patched = patch(code, tree, where, todo)
    verify(code, patched, where, todo)
    for path in (args.original, args.patched):
        if os.path.lexists(path):
            raise ToolError(f"{path}: exists already: not overwritten")
    write_new(args.original, code)
    write_new(args.patched, patched)
    sys.stdout.writelines(difflib.unified_diff(code.splitlines(keepends=True), patched.splitlines(keepends=True),
                                               os.path.basename(args.original), os.path.basename(args.patched)))
    for name, flag, value in todo:
        print(f"patched: {name} = {value!r} ({flag})", file=sys.stderr)
    if "seed" not in fields:
        print("patched: no seed: this trainer takes no seed (its runs are not seeded)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "record_trainer_patch")
