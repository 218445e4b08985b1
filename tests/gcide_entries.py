"""GCIDE entries read with Python's own gzip, independent of data/gcide.h, for the tokenizer
tests and the tiktoken fixture: the distinct (offset, length) pairs of gcide.index (dictd's
base-64 numbers), in file order, without the 00-database-* metadata entries."""
import gzip
import os

DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64(s):
    v = 0
    for c in s:
        v = v * 64 + DIGITS.index(c)
    return v


def entries(gcide_dir):
    """All entries as bytes, in file order."""
    ents = set()
    with open(os.path.join(gcide_dir, "gcide.index"), encoding="utf-8") as f:
        for line in f:
            w, o, l = line.rstrip("\n").split("\t")
            if not w.startswith("00-database"):
                ents.add((_b64(o), _b64(l)))
    data = gzip.open(os.path.join(gcide_dir, "gcide.dict.dz")).read()
    return [data[o:o + l] for o, l in sorted(ents)]
