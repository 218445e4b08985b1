#!/usr/bin/env python3
"""Writes a folder of synthetic token shards shaped like FineWeb's for speed measurements:
documents of exponential length (mean 1000 tokens, as FineWeb's GPT-2 tokenization has), each
starting with token 50256, the rest uniform in the GPT-2 range. The text is noise, so a run on
them measures speed only (its loss stays near ln(50257)); the document lengths are what matter,
because they decide how many attention tiles the document mask cuts and skips.

    python3 scripts/synthetic_shards.py OUT_DIR [--train-tokens N] [--val-tokens N] [--mean-doc L] [--seed S]

The format and the manifest are `build/prepare`'s (docs/formats.md): synth_val_000000.bin, then
synth_train_000001.bin ... of at most --shard-tokens tokens, and manifest.tsv. OUT_DIR must be new
or empty (the folders above it are made as needed); the shards are written into a hidden folder beside it (.OUT_DIR.part, made new: one that
exists is refused, never removed) that is renamed into place at the end, so an interrupted run leaves
nothing half-written.
"""
import argparse
import hashlib
import os
import shutil
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shard_format import header_bytes  # noqa: E402
from tool_errors import ToolError, require, run  # noqa: E402
require("numpy")  # a message, not a traceback, without numpy
import numpy as np  # noqa: E402

BOS, VOCAB = 50256, 50257
MAX_SHARD, MAX_TOTAL, MAX_SHARDS = 200_000_000, 20_000_000_000, 10_000  # tokens in a shard (built in memory), in all; shards


def documents(rng, n, mean_doc):
    """n tokens of whole documents: BOS, then length - 1 uniform non-BOS ids."""
    out = np.empty(n, dtype=np.uint16)
    out[:] = rng.integers(0, BOS, size=n, dtype=np.uint16)
    pos = 0
    while pos < n:
        out[pos] = BOS
        pos += max(2, int(rng.exponential(mean_doc)))
    return out


def write_shard(path, tokens):
    data = header_bytes(int(tokens.size)) + tokens.astype("<u2").tobytes()
    try:
        with open(path, "xb") as f:
            f.write(data)
    except OSError as e:  # (a failed write names no file of its own)
        raise OSError(e.errno, e.strerror, path) from None
    return hashlib.sha256(data).hexdigest()


def remove_empty(folders):
    """Removes the folders (deepest first) that are still empty."""
    for d in folders:
        if not os.path.lexists(d):  # (never made: the run failed making it)
            continue
        try:
            os.rmdir(d)
        except OSError:
            return


def main(argv):
    p = argparse.ArgumentParser(prog="synthetic_shards", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--train-tokens", type=int, default=20_000_000)
    p.add_argument("--val-tokens", type=int, default=2_000_000)
    p.add_argument("--shard-tokens", type=int, default=10_000_000)
    p.add_argument("--mean-doc", type=float, default=1000.0, help="mean document length in tokens")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    # a shard is built whole in memory (a few copies of it), so one is at most MAX_SHARD tokens
    for flag, v, lo, hi in (("--train-tokens", a.train_tokens, 2, MAX_TOTAL), ("--val-tokens", a.val_tokens, 2, MAX_SHARD),
                            ("--shard-tokens", a.shard_tokens, 2, MAX_SHARD), ("--mean-doc", a.mean_doc, 2, 10_000_000),
                            ("--seed", a.seed, 0, 2**63 - 1)):
        if not lo <= v <= hi:  # false for nan too
            p.error(f"{flag} {v}: must be from {lo} to {hi}")
    if -(-a.train_tokens // a.shard_tokens) > MAX_SHARDS:
        p.error(f"--shard-tokens {a.shard_tokens}: --train-tokens {a.train_tokens} would make more than {MAX_SHARDS} shards")
    if not a.out_dir:
        p.error("OUT_DIR is empty: name the folder to write")
    out = a.out_dir.rstrip("/") or "/"
    name = os.path.basename(out)
    parent = os.path.dirname(os.path.abspath(out))  # (lexically: new/../x is x, as it reads)
    target = os.path.join(parent, name)  # OUT_DIR, where the shards are put in place
    if name in ("", ".", "..") or os.path.ismount(target):
        raise ToolError(f"{out}: not a folder this tool can put in place: name a new folder inside one")
    if os.path.islink(target):
        raise ToolError(f"{out}: a symbolic link: name the folder itself")
    if os.path.lexists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise ToolError(f"{out}: exists and is not an empty folder: name a new one")
    if len(os.fsencode(name)) > 255 - len(".part") - 1:
        raise ToolError(f"{out}: a name of at most 249 bytes, so that its staging folder's (.NAME.part) fits")
    made = []  # the folders above OUT_DIR this run makes, removed again if it fails
    up = parent
    while not os.path.lexists(up):
        made.append(up)
        up = os.path.dirname(up)
    try:  # as mkdir -p would: a new OUT_DIR may sit in new folders
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        remove_empty(made)
        why = "a file is in the way" if isinstance(e, (FileExistsError, NotADirectoryError)) else e.strerror
        raise ToolError(f"{out}: cannot make the folder it goes in, {parent}: {why}") from None
    tmp = os.path.join(parent, "." + name + ".part")
    try:  # made new: a folder of that name is not this run's to remove
        os.mkdir(tmp)
    except FileExistsError:
        raise ToolError(f"{tmp}: exists (the staging folder of an interrupted run, or something else): "
                        "remove it, or name another OUT_DIR") from None
    except OSError:
        remove_empty(made)
        raise
    rng = np.random.default_rng(a.seed)
    rows = []
    try:
        jobs = [("val", 0, a.val_tokens)]
        left, i = a.train_tokens, 1
        while left > 0:
            jobs.append(("train", i, min(left, a.shard_tokens)))
            left -= a.shard_tokens
            i += 1
        for split, index, n in jobs:
            name = f"synth_{split}_{index:06d}.bin"
            tokens = documents(rng, n, a.mean_doc)
            rows.append((name, n, int((tokens == BOS).sum()), write_shard(os.path.join(tmp, name), tokens)))
        with open(os.path.join(tmp, "manifest.tsv"), "x") as f:
            f.write("# train_gpt shard manifest v1\nfile\ttokens\tdocuments\tsha256\n")
            for r in rows:
                f.write("\t".join(map(str, r)) + "\n")
        if os.path.isdir(target):  # an empty folder given: the shards take its place, with its mode and owner
            st = os.stat(target)
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:  # (another user's folder: as far as this user may)
                pass
            os.rmdir(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_empty(made)
        raise
    docs = sum(r[2] for r in rows)
    print(f"synthetic_shards: {len(rows)} shards, {sum(r[1] for r in rows)} tokens, {docs} documents in {out}")
    return 0


if __name__ == "__main__":
    run(lambda: main(sys.argv[1:]), "synthetic_shards")
