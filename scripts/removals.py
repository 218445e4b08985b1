"""Removal campaigns for scripts/ab_run.py (docs/recipes.md, "Removal campaigns"): a recipe
run whole and with one mechanism at a time turned off, as modded-nanogpt's records ablate theirs.

A removal is a set of recipe keys with the values that turn a mechanism off. `--remove KEY` sets
KEY to its neutral value, which the trainer's schema names (`train_gpt --print-schema`: one
place, the table in train/options.cpp; a neutral value may be another key's resolved value,
{"same_as": KEY}); `--remove KEY=VALUE` gives the value. A campaign file (--removals FILE, TOML)
lists removals of one or more keys each:

    [[removal]]
    keys = ["attention.doc_mask"]                   # each to its neutral value
    [[removal]]
    name = "no-muon-momentum"                       # optional: made from the keys
    set = { "optimizer.muon.momentum_start" = 0.0, "optimizer.muon.momentum_end" = 0.0 }

Each removal is a leg of the campaign: the recipe with its keys changed, written as a recipe
file. Refused (exit 2, naming the key, before anything runs or is written): a key the schema does
not know; a key without a neutral value given without one; a key of the data or the validation
(no mechanism: they do not define the run's computation); a value of the wrong type; a key given
twice, in one removal or two (a removal campaign turns each mechanism off once; with the same
value it is a duplicate, with another a contradiction); an empty list; a removal whose value is
the recipe's own (after the common flags): the leg would be the full recipe again, runs that
measure nothing; a removal that a common flag overrides (the trainer's resolved recipe of the leg
would not change); a value the trainer refuses (out of range, an odd layer count, ...), with the
trainer's own message. The trainer checks each leg by resolving it (--print-recipe, no GPU).
"""
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import MAX_TOML_BYTES, ToolError, field, load_json, parse_toml, record, require  # noqa: E402

FULL = "full"  # the leg of the whole recipe: the campaign's first variant, its baseline
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]{0,99}")  # a leg's name: a file name, no '_g' (ab_run's variant names)
MAX_KEYS = 1000  # keys in one campaign's removals (the schema has a few dozen)
TYPES = ("integer", "number", "string")


class Refusal(Exception):
    """Bad flags or a bad campaign file: ab_run ends with the message and exit status 2."""


class Text(str):
    """A value of --remove KEY=VALUE: text, read as the key's type (from_text)."""


# ------------------------------------------------------------------------------------ the schema
def ask_trainer(cmd):
    """The trainer's answer to a question that needs no GPU (--print-schema, --print-recipe): its
    completed process, or ToolError where it cannot start or does not answer in 300 s."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise ToolError(f"cannot start {cmd[0]!r} (--trainer): {e.strerror or e}")
    except subprocess.TimeoutExpired:
        raise ToolError(f"{shlex.join(cmd)}: no answer in 300 s")


def load_schema(trainer):
    """{key: entry} of the trainer's --print-schema, each entry checked: key, type, flag (or
    None), log, defines_run, neutral (a value, {"same_as": KEY} or None), off."""
    cmd = trainer + ["--print-schema"]
    r = ask_trainer(cmd)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise ToolError(f"{shlex.join(cmd)} failed (exit {r.returncode}: {why}): a trainer without --print-schema cannot "
                        "say which keys a removal campaign may turn off")
    where = f"{shlex.join(cmd)}'s output"
    entries = load_json(r.stdout, where)
    if not isinstance(entries, list):
        raise ToolError(f"{where}: not a JSON list of the recipe keys")
    schema = {}
    for i, e in enumerate(entries):
        at = f"{where}: entry {i}"
        record(e, at)
        key = field(e, "key", at, str)
        if key in schema:
            raise ToolError(f"{at}: the key {key} twice")
        entry = {"key": key, "type": field(e, "type", at, str, choices=TYPES), "log": field(e, "log", at, str),
                 "defines_run": field(e, "defines_run", at, bool), "range": field(e, "range", at, str),
                 "flag": e.get("flag") if e.get("flag") is None else field(e, "flag", at, str),
                 "off": e.get("off") if e.get("off") is None else field(e, "off", at, str)}
        n = e.get("neutral")
        if isinstance(n, dict):
            entry["neutral"] = {"same_as": field(n, "same_as", f"{at}: neutral", str)}
        elif n is not None:
            entry["neutral"] = typed(key, entry["type"], n, at)
        else:
            entry["neutral"] = None
        schema[key] = entry
    for key, e in schema.items():
        same = e["neutral"].get("same_as") if isinstance(e["neutral"], dict) else None
        if same is not None and (same not in schema or schema[same]["type"] != e["type"]):
            raise ToolError(f"{where}: {key}'s neutral value is the value of {same}, which is no key of its type")
    return schema


def typed(key, kind, v, where):
    """A recipe value of the schema's type (an integer, a finite number, a string), or Refusal."""
    ok = (kind == "integer" and isinstance(v, int) and not isinstance(v, bool)) or \
        (kind == "number" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)) or \
        (kind == "string" and isinstance(v, str))
    if not ok:
        raise Refusal(f"{where}: {key} wants {'an integer' if kind == 'integer' else 'a finite number' if kind == 'number' else 'a string'}, "
                      f"got {json.dumps(v) if isinstance(v, (str, bool)) or v is None else repr(v)}")
    return float(v) if kind == "number" else v


def from_text(key, kind, text, where):
    """A --remove KEY=VALUE value read as the key's type: integers and numbers as plain decimals
    (as the trainer's flags take them), strings as given."""
    if kind == "integer":
        if not re.fullmatch(r"-?[0-9]{1,18}", text):
            raise Refusal(f"{where}: {key} wants an integer, got {text!r}")
        return int(text)
    if kind == "number":
        if not re.fullmatch(r"-?[0-9]{1,30}(\.[0-9]{0,30})?([eE][-+]?[0-9]{1,3})?|-?\.[0-9]{1,30}([eE][-+]?[0-9]{1,3})?", text):
            raise Refusal(f"{where}: {key} wants a number (a plain decimal), got {text!r}")
        return float(text)
    return text


# ------------------------------------------------------------------------------------ the removals
def from_flags(specs):
    """The removals of --remove flags: [(where, name or None, [(key, value text or None)])], one
    removal a key. Each flag is KEY[=VALUE][,KEY[=VALUE]...]."""
    out = []
    for spec in specs:
        items = spec.split(",")
        if not spec.strip() or any(not i.strip() for i in items):
            raise Refusal(f"--remove {spec!r}: an empty key; want KEY[=VALUE][,KEY[=VALUE]...]")
        for item in items:
            key, eq, value = item.strip().partition("=")
            if eq and value == "":
                raise Refusal(f"--remove {item.strip()!r}: an empty value; leave '=' out for the key's neutral value")
            out.append((f"--remove {item.strip()}", None, [(key.strip(), Text(value) if eq else None)]))
    return out


def from_file(path):
    """The removals of a campaign file (the docstring's form): [(where, name or None, [(key,
    value or None)])], values as TOML typed them."""
    doc = toml_table(utf8_text(path, "--removals", "campaign file"), f"--removals {path}", "campaign file")
    extra = sorted(set(doc) - {"removal"})
    if extra:
        raise Refusal(f"--removals {path}: unknown key {extra[0]} (a campaign file holds [[removal]] tables only)")
    removals = doc.get("removal")
    if not isinstance(removals, list) or not removals:
        raise Refusal(f"--removals {path}: no [[removal]] tables: an empty campaign")
    out = []
    for i, r in enumerate(removals, 1):
        where = f"--removals {path}: removal {i}"
        if not isinstance(r, dict):
            raise Refusal(f"{where}: not a table")
        extra = sorted(set(r) - {"name", "keys", "set"})
        if extra:
            raise Refusal(f"{where}: unknown key {extra[0]} (name, keys, set)")
        name = r.get("name")
        if name is not None and not isinstance(name, str):
            raise Refusal(f"{where}: name wants a string")
        keys, values = r.get("keys", []), r.get("set", {})
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise Refusal(f"{where}: keys wants a list of recipe keys (strings)")
        if not isinstance(values, dict):
            raise Refusal(f"{where}: set wants a table of recipe keys and values, e.g. set = {{ \"attention.doc_mask\" = 0 }}")
        flat = {}
        for k, v in values.items():  # set = { attention.doc_mask = 0 } (a dotted key) reads as a nested table
            for kk, vv in _flatten(v, k).items() if isinstance(v, dict) else [(k, v)]:
                if kk in flat:  # { "a.b" = 1, a = { b = 2 } }: one key written two ways, TOML keeps both
                    raise Refusal(f"{where}: set gives {kk} twice (as \"{kk}\" and as a table): give it once")
                flat[kk] = vv
        pairs = [(k, None) for k in keys] + list(flat.items())
        if not pairs:
            raise Refusal(f"{where}: no keys: give keys = [...] or set = {{...}}")
        out.append((where, name, pairs))
    return out


def _flatten(table, prefix=""):
    out = {}
    for k, v in table.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def leg_name(keys):
    """The default name of a removal of these keys: no-KEY (underscores as '-', which variant
    names keep free of '_g'), joined by '+'."""
    return "no-" + "+".join(k.replace("_", "-") for k in keys)


def resolve(removals, schema, full):
    """The legs: [{"name", "set": {key: value}, "was": {key: value}, "log": {log name: value},
    "off": [text]}] for the removals (from_flags, from_file) against the schema and the full
    recipe's resolved values (full: {key: value}). Refusal for every case of the docstring but
    the trainer's own checks (verify)."""
    if not removals:
        raise Refusal("--remove/--removals: no removal given")
    seen, legs, names = {}, [], {FULL: "the whole recipe"}
    total = sum(len(p) for _, _, p in removals)
    if total > MAX_KEYS:
        raise Refusal(f"--remove/--removals: {total} keys: at most {MAX_KEYS}")
    removable = sorted(k for k, e in schema.items() if e["neutral"] is not None)
    for where, name, pairs in removals:
        leg = {"name": name, "set": {}, "was": {}, "log": {}, "off": []}
        for key, value in pairs:
            if key not in schema:
                raise Refusal(f"{where}: unknown recipe key {key!r} (the trainer's --print-schema; keys with a neutral value: "
                              f"{', '.join(removable) or 'none'}; docs/recipes.md lists every key)")
            e = schema[key]
            if not e["defines_run"]:
                raise Refusal(f"{where}: {key} is the data's or the validation's, not a mechanism of the run: no removal of it")
            if value is None:
                if e["neutral"] is None:
                    raise Refusal(f"{where}: {key} has no neutral value in the schema (train_gpt --print-schema): nothing says what "
                                  f"turns it off; give one, --remove {key}=VALUE (keys with one: {', '.join(removable) or 'none'})")
                n = e["neutral"]
                value = full[n["same_as"]] if isinstance(n, dict) else n
                off = e["off"] or f"{key} {value!r}"
            elif isinstance(value, Text):
                value = from_text(key, e["type"], value, where)
                off = f"{key} = {value!r} (given)"
            else:
                value = typed(key, e["type"], value, where)
                off = f"{key} = {value!r} (given)"
            if key in seen:
                first_where, first_value = seen[key]
                if same(first_value, value):
                    raise Refusal(f"{where}: {key} is removed twice (also {first_where}): a removal campaign turns each mechanism "
                                  "off once; give it once")
                raise Refusal(f"{where}: {key} is given twice, with {first_value!r} ({first_where}) and {value!r}: which turns "
                              "it off? give it once")
            seen[key] = (where, value)
            if key not in full:
                raise ToolError(f"{where}: {key} is not in the recipe's resolved values (the trainer's --print-recipe)")
            if same(full[key], value):
                raise Refusal(f"{where}: {key} = {value!r} is the recipe's own value (after the common flags): the leg would be the "
                              "full recipe again, runs that measure nothing; leave it out")
            leg["set"][key] = value
            leg["was"][key] = full[key]
            leg["log"][e["log"]] = value
            leg["off"].append(off)
        leg["name"] = name if name is not None else leg_name(list(leg["set"]))
        if not NAME_RE.fullmatch(leg["name"]) or "_g" in leg["name"]:
            raise Refusal(f"{where}: the name {leg['name']!r} is not a plain name (letters, digits, '.', '+', '-'; at most 100)")
        if leg["name"] in names:
            raise Refusal(f"{where}: the name {leg['name']} is {names[leg['name']]}'s too; give each removal a name of its own")
        names[leg["name"]] = where
        legs.append(leg)
    return legs


def same(a, b):
    """Whether two recipe values are equal (numbers by value: 1 is 1.0)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b


# ------------------------------------------------------------------------------------ the recipes
def utf8_text(path, flag, what):
    """The text of the file a flag names, or Refusal naming the flag and file (missing, a folder,
    unreadable, a FIFO or device, not UTF-8)."""
    if os.path.exists(path) and not os.path.isdir(path) and not os.path.isfile(path):  # a FIFO would hang the read
        raise Refusal(f"{flag} {path}: not a regular file (a FIFO, device or socket), not a {what}")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TOML_BYTES + 1)
    except FileNotFoundError:
        raise Refusal(f"{flag} {path}: no such file")
    except IsADirectoryError:
        raise Refusal(f"{flag} {path}: a folder, not a {what}")
    except OSError as e:
        raise Refusal(f"{flag} {path}: cannot read it: {e.strerror}")
    if len(data) > MAX_TOML_BYTES:
        raise Refusal(f"{flag} {path}: larger than {MAX_TOML_BYTES >> 20} MiB, not a {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal(f"{flag} {path}: not UTF-8 text, not a {what}")


def toml_table(text, where, what):
    """The TOML table of a flag's file (tool_errors.parse_toml), or Refusal naming where."""
    try:
        return parse_toml(text, where, what)
    except ToolError as e:
        raise Refusal(str(e))


def recipe_text(path):
    """The recipe file's text, or Refusal naming it (missing, a folder, not UTF-8, not TOML,
    nested too deeply): read whole here, it is not left for the trainer to refuse."""
    text = utf8_text(path, "--recipe", "recipe file")
    toml_table(text, f"--recipe {path}", "recipe file")
    return text


def leg_text(text, recipe, leg):
    """The leg's recipe: the recipe's text with the leg's keys set (python3-tomlkit keeps the
    rest, its comments included), under a comment saying what it is."""
    require("tomlkit", prog="ab_run")  # (the removal mode alone needs it: Debian python3-tomlkit, scripts/setup.sh)
    import tomlkit
    doc = tomlkit.parse(text)
    for key, value in leg["set"].items():
        parts = key.split(".")
        t = doc
        for p in parts[:-1]:
            if p not in t:  # a table the recipe leaves to the trainer's defaults: the leg gives it
                t[p] = tomlkit.table()
            t = t[p]
        t[parts[-1]] = value
    said = ", ".join(f"{k} = {v!r} (was {leg['was'][k]!r})" for k, v in leg["set"].items())
    head = f"# scripts/ab_run.py's removal leg {leg['name']}: {recipe} with {said}"
    return " ".join(head.split()) + "\n" + tomlkit.dumps(doc)


def resolved(trainer, recipe, common, name):
    """{key: value} of the trainer's resolved recipe (--print-recipe: no GPU) for this recipe
    file and the common flags; Refusal with the trainer's message where it refuses them."""
    cmd = trainer + common + ["--recipe", recipe, "--print-recipe"]
    r = ask_trainer(cmd)
    if r.returncode != 0:
        why = " ".join((r.stderr.strip() or r.stdout.strip() or "no message").split())
        raise Refusal(f"{name}: the trainer refuses it (exit {r.returncode}): {why}")
    return _flatten(parse_toml(r.stdout, f"{shlex.join(cmd)}: its --print-recipe", "resolved recipe"))


def verify(trainer, common, text, recipe, legs, schema, full):
    """Resolves each leg's recipe through the trainer (in a temporary folder): Refusal where the
    trainer refuses it, or where the leg differs from the full recipe in other keys than its own
    (a common flag that overrides a removed key, named)."""
    with tempfile.TemporaryDirectory(prefix="ab_run-legs-") as tmp:
        for leg in legs:
            path = os.path.join(tmp, leg["name"] + ".toml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(leg_text(text, recipe, leg))
            what = f"removal {leg['name']} ({', '.join(f'{k} = {v!r}' for k, v in leg['set'].items())})"
            try:
                got = resolved(trainer, path, common, what)
            except Refusal as e:
                raise Refusal(str(e).replace(path, f"{leg['name']}'s recipe"))
            for key in sorted(set(got) | set(full)):
                want = leg["set"].get(key, full.get(key))
                if not same(got.get(key), want):
                    flag = schema.get(key, {}).get("flag")
                    if key in leg["set"] and flag:
                        raise Refusal(f"{what}: the common flags give {flag}, which overrides the recipe's {key}: the leg would "
                                      f"not change it; leave {flag} out of the common flags")
                    raise ToolError(f"{what}: the trainer resolves {key} to {got.get(key)!r}, not {want!r}")
