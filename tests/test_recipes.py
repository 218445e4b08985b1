"""Recipes on train_gpt's command line, without a GPU (docs/recipes.md): every refusal of a bad
recipe (an unknown key, a wrong type, a value out of range, a key missing, a file missing, a
TOML syntax error) exits 2 naming the file, the line and the key; --preset with --recipe is
refused; --print-recipe shows flags over a recipe; the shipped recipes are built into the binary
(found from any working directory) and --preset speedrun is recipes/2024-12-10.toml; the shipped
files read as TOML by another reader (Python's tomllib) hold the values the binary resolves.

    python3 tests/test_recipes.py [TRAINER]
"""
import os
import re
import struct
import subprocess
import sys
import tempfile
import tomllib

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

SUITE = "recipes-cli"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "train_gpt")
SPEEDRUN = os.path.join(ROOT, "recipes", "2024-12-10.toml")
TMP = tempfile.mkdtemp(prefix="recipes_cli_")


def run(*flags, cwd=None):
    r = subprocess.run([TRAIN, *flags], capture_output=True, text=True, timeout=120, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def values(printed):
    """A --print-recipe output without its first line (which names the recipe's source)."""
    return printed.split("\n", 1)[1] if "\n" in printed else printed


def recipe_with(name, edit):
    """A copy of the speedrun recipe with edit(text) applied, written to TMP/name; its path."""
    text = open(SPEEDRUN).read()
    changed = edit(text)
    assert changed != text, f"the edit of {name} changed nothing"
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(changed)
    return path


def line_of(path, pattern):
    """The 1-based number of the first line of the file matching the pattern."""
    return next(i for i, l in enumerate(open(path).read().split("\n"), 1) if re.search(pattern, l))


# each refusal: exit 2, the file, its line and the key named, no traceback or crash
CASES = [
    ("unknown key", "widht.toml", lambda t: t.replace("\nwidth = 768", "\nwidht = 768"), r"^widht =", "model.widht",
     "unknown key"),
    ("unknown table", "tables.toml", lambda t: t.replace("[schedule]", "[schedules]"), r"^\[schedules\]", "schedules",
     "unknown key"),
    ("wrong type", "type.toml", lambda t: t.replace("\nwidth = 768", '\nwidth = "768"'), r'^width = "768"', "model.width",
     "got a string"),
    ("a number for a string", "choice.toml", lambda t: t.replace('window_mask = "uni"', "window_mask = 1"), r"^window_mask = 1",
     "attention.window_mask", "want a string"),
    ("a value not among the choices", "choice2.toml", lambda t: t.replace('window_mask = "uni"', 'window_mask = "both"'),
     r'^window_mask = "both"', "attention.window_mask", "not one of uni, bi"),
    ("out of range (integer)", "range.toml", lambda t: t.replace("\nlayers = 12", "\nlayers = 1"), r"^layers = 1$", "model.layers",
     "out of range"),
    ("out of range (number)", "range2.toml", lambda t: t.replace("\nlr = 0.05", "\nlr = -0.05"), r"^lr = -0.05", "optimizer.muon.lr",
     "out of range"),
    ("out of range (beta 1)", "range3.toml", lambda t: t.replace("beta2 = 0.95", "beta2 = 1.0"), r"^beta2 = 1.0", "optimizer.adam.beta2",
     "out of range"),
    ("TOML syntax error", "syntax.toml", lambda t: t.replace("\nheads = 6", "\nheads = "), r"^heads = $", None, "not a TOML file"),
    ("a key given twice", "twice.toml", lambda t: t.replace("\nheads = 6", "\nheads = 6\nheads = 6"), r"^heads = 6", None,
     "not a TOML file"),
]
for what, name, edit, line_pattern, key, words in CASES:
    path = recipe_with(name, edit)
    rc, out, err = run("--recipe", path, "--print-recipe")
    msg = out + err
    line = line_of(path, line_pattern)
    if what == "a key given twice":
        line += 1  # (the second one is refused)
    check(f"{what}: exit 2 naming {name}, line {line}" + (f" and {key}" if key else ""),
          rc == 2 and f"{path}:{line}:" in msg and (key is None or key in msg) and words in msg and "Traceback" not in msg
          and "terminate" not in msg, f"exit {rc}: {msg}")

path = recipe_with("missing.toml", lambda t: t.replace("\nhidden = 3072", ""))
rc, out, err = run("--recipe", path)
check("a key missing: exit 2 naming the file and the key", rc == 2 and path in err and "no key model.hidden" in err, f"exit {rc}: {err}")
rc, out, err = run("--recipe", os.path.join(TMP, "nope.toml"))
check("a missing file: exit 2 naming it", rc == 2 and "nope.toml" in err and "cannot read" in err, f"exit {rc}: {err}")
rc, out, err = run("--recipe", TMP)
check("a folder for a file: exit 2 naming it", rc == 2 and TMP in err and "a folder" in err, f"exit {rc}: {err}")
bad = os.path.join(TMP, "binary.toml")
open(bad, "wb").write(b"[model]\nlayers = 2\xff\xfe\n")
rc, out, err = run("--recipe", bad)
check("bytes that are not UTF-8: exit 2 naming the file and line", rc == 2 and f"{bad}:2:" in err, f"exit {rc}: {err}")
rc, out, err = run("--preset", "tiny", "--recipe", SPEEDRUN)
check("--preset with --recipe: exit 2 naming both", rc == 2 and "--preset" in err and "--recipe" in err, f"exit {rc}: {err}")
rc, out, err = run("--preset", "nope")
check("an unknown preset: exit 2 naming it and the shipped ones", rc == 2 and "nope" in err and "2024-12-10" in err and "tiny" in err,
      f"exit {rc}: {err}")

# flags over a recipe, whatever their order on the command line
rc, out, err = run("--steps", "7", "--recipe", os.path.join(ROOT, "recipes", "tiny.toml"), "--seq-len=2048", "--print-recipe")
doc = tomllib.loads(out) if rc == 0 else {}
check("--print-recipe: flags over the recipe", rc == 0 and doc.get("run", {}).get("steps") == 7 and doc["batch"]["seq_len"] == 2048
      and doc["model"]["layers"] == 2 and doc["validation"]["every"] == 10, out + err)
# the resolved recipe is a recipe: read back, it resolves to itself
printed = os.path.join(TMP, "printed.toml")
open(printed, "w").write(out)
rc2, out2, err2 = run("--recipe", printed, "--print-recipe")
check("the printed recipe read back resolves to the same values", rc2 == 0 and values(out2) == values(out), out2 + err2)

# the shipped recipes: built in (any working directory), the same as the files, speedrun = 2024-12-10
for preset, name in (("default", "default"), ("tiny", "tiny"), ("speedrun", "2024-12-10"), ("2024-12-10", "2024-12-10"),
                     ("2025-08-23", "2025-08-23")):
    rc, out, err = run("--preset", preset, "--print-recipe", cwd=TMP)
    rcf, outf, errf = run("--recipe", os.path.join(ROOT, "recipes", name + ".toml"), "--print-recipe", cwd="/")
    check(f"--preset {preset} from another folder = --recipe recipes/{name}.toml", rc == 0 and rcf == 0 and values(out) == values(outf),
          out + err + outf + errf)
    # what another TOML reader finds in the file is what the binary resolved
    want = tomllib.load(open(os.path.join(ROOT, "recipes", name + ".toml"), "rb"))
    check(f"recipes/{name}.toml read by tomllib = the binary's values", rc == 0 and tomllib.loads(out) == want,
          f"{want}\n---\n{out}")
# the 2025-08-23 recipe: a run is refused before any GPU work (exit 2), naming each key whose
# value the GPU trainer does not compute (docs/recipes.md, "The 2025-08-23 recipe"), and no
# schedule's key (model::Schedule, which it runs)
LATER = os.path.join(ROOT, "recipes", "2025-08-23.toml")
UNIMPLEMENTED = ["model.value_embeds", "model.value_embed_layers", "model.skip_attention", "model.init_bound", "model.logit_softcap",
                 "model.head_fp8", "attention.scale", "attention.gate_dims", "attention.rotary", "attention.rotary_base",
                 "attention.long_window_layers", "batch.loss_reduction", "optimizer.adam.eps_form",
                 "optimizer.muon.fan_scale", "validation.seq_len"]
for flags in (["--recipe", LATER], ["--preset", "2025-08-23", "--steps", "3"]):
    rc, out, err = run(*flags, cwd=TMP)
    named = [k for k in UNIMPLEMENTED if k + " = " in err]
    check(f"{' '.join(flags[:2])}: exit 2 naming the {len(UNIMPLEMENTED)} keys the GPU trainer lacks, no schedule's key, not "
          "batch.align_to_bos (the host's loader runs it), no traceback",
          rc == 2 and len(named) == len(UNIMPLEMENTED) and "schedule." not in err and "batch.align_to_bos" not in err
          and "Traceback" not in err and "terminate" not in err, f"exit {rc}, named {len(named)}: {err}")
# one of those keys over the 2024-12-10 recipe: refused naming it alone
path = recipe_with("gate.toml", lambda t: t.replace("gate_dims = 0", "gate_dims = 12"))
rc, out, err = run("--recipe", path, cwd=TMP)
check("attention.gate_dims = 12 over 2024-12-10: exit 2 naming it alone", rc == 2 and "attention.gate_dims = 12" in err
      and sum(k + " = " in err for k in UNIMPLEMENTED) == 1, f"exit {rc}: {err}")
rc, out, err = run("--recipe", path, "--print-recipe", cwd=TMP)
check("... and --print-recipe of it still prints", rc == 0 and tomllib.loads(out)["attention"]["gate_dims"] == 12, out + err)

# batch.align_to_bos = 1 at the record's seq_len 49152 over 2024-12-10: not refused by the
# options; the run reaches the training shards, and one without a BOS token is refused there
# (exit 1, before any GPU work), naming it and its first window of 2 x 8 x 49152 tokens
path = recipe_with("aligned.toml", lambda t: t.replace("align_to_bos = 0", "align_to_bos = 1").replace("seq_len = 65536", "seq_len = 49152"))
no_bos = os.path.join(TMP, "no_bos_000000.bin")
with open(no_bos, "wb") as f:
    n = 800000  # more than the 786,434 tokens of one step's window
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *([7] * n)))
rc, out, err = run("--recipe", path, "--train-data", no_bos, "--val-data", os.path.join(TMP, "none_*.bin"), cwd=TMP)
check("align_to_bos = 1, seq_len 49152: a training shard without a BOS token is refused naming it (exit 1), no key refused",
      rc == 1 and "no_bos_000000.bin" in err and "step 0: the window [0, 786432) holds BOS tokens for 0 of its 8 sequences" in err
      and "implement" not in err and "Traceback" not in err and "terminate" not in err, f"exit {rc}: {err}")

rc, out, err = run(cwd=TMP)
check("no flag at all: the default recipe (no refusal before the data)", "recipe" not in err and "preset" not in err, err)

finish(SUITE)
