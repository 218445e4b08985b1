#!/usr/bin/env python3
"""Records tiktoken's own "gpt2" ids for the tokenizer tests (tests/fixtures/tiktoken_gpt2.json).

    inputs  GCIDE_DIR > inputs.json        the texts: tests/tokenizer_cases.py and 300 GCIDE entries
    ids VOCAB_DIR inputs.json > out.json    on a machine with tiktoken (offline: VOCAB_DIR holds
                                            encoder.json and vocab.bpe, placed in tiktoken's cache
                                            under the names of the URLs it would fetch; tiktoken
                                            checks their SHA-256 itself)
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))



def main():
    mode = sys.argv[1]
    if mode == "inputs":
        from tokenizer_cases import CASES
        import gzip
        gdir = sys.argv[2]
        digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

        def b64(s):
            v = 0
            for c in s:
                v = v * 64 + digits.index(c)
            return v
        ents = set()
        for line in open(os.path.join(gdir, "gcide.index"), encoding="utf-8"):
            w, o, l = line.rstrip("\n").split("\t")
            if not w.startswith("00-database"):
                ents.add((b64(o), b64(l)))
        data = gzip.open(os.path.join(gdir, "gcide.dict.dz")).read()
        texts = list(CASES) + [data[o:o + l] for o, l in sorted(ents)[7::421][:300]]
        json.dump([t.hex() for t in texts], sys.stdout)
        return
    vocab_dir, inp = sys.argv[2], sys.argv[3]
    cache = tempfile.mkdtemp()
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    for name in ("vocab.bpe", "encoder.json"):
        shutil.copy(os.path.join(vocab_dir, name), os.path.join(cache, hashlib.sha1((base + name).encode()).hexdigest()))
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    import tiktoken
    enc = tiktoken.get_encoding("gpt2")
    texts = [bytes.fromhex(h) for h in json.load(open(inp))]
    cases = [{"hex": t.hex(), "ids": enc.encode_ordinary(t.decode("utf-8", errors="replace"))} for t in texts]
    json.dump({"tiktoken_version": tiktoken.__version__, "encoding": "gpt2 (encode_ordinary)", "cases": cases}, sys.stdout)


if __name__ == "__main__":
    main()
