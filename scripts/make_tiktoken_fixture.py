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
sys.path.insert(0, HERE)
from tool_errors import ToolError, regular_file, run as run_tool  # noqa: E402



def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("inputs", "ids") or len(sys.argv) != {"inputs": 3, "ids": 4}[sys.argv[1]]:
        print(__doc__, file=sys.stderr)
        return 2
    mode = sys.argv[1]
    if mode == "inputs":
        from gcide_entries import entries
        from tokenizer_cases import CASES
        texts = list(CASES) + entries(sys.argv[2])[7::421][:300]
        json.dump([t.hex() for t in texts], sys.stdout)
        return 0
    vocab_dir, inp = sys.argv[2], sys.argv[3]
    regular_file(inp, "inputs file")
    for name in ("vocab.bpe", "encoder.json"):
        regular_file(os.path.join(vocab_dir, name), "GPT-2 vocabulary file")
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        raise ToolError("the Python module 'tiktoken' is missing: run this where tiktoken is installed")
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


    return 0


if __name__ == "__main__":
    run_tool(main, "make_tiktoken_fixture")
