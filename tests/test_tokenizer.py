"""The C++ tokenizer (build/tokenize) against the independent reference in gpt2_reference.py on a
table of tricky strings and on a slice of GCIDE, and against ids produced by tiktoken itself
(tests/fixtures/tiktoken_gpt2.json, made by scripts/make_tiktoken_fixture.py on a machine that
has tiktoken) when that file is present. Ids must be equal exactly: there is no tolerance.

    python3 tests/test_tokenizer.py BUILD_DIR VOCAB_DIR [GCIDE_DIR]
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import require; require("regex", suite="tokenizer")  # noqa: E402,E702
sys.path.insert(0, os.path.dirname(__file__))
from gcide_entries import entries  # noqa: E402
from gpt2_reference import Reference  # noqa: E402
from harness import check, finish  # noqa: E402
from tokenizer_cases import CASES  # noqa: E402

if len(sys.argv) < 3:
    print("usage: python3 tests/test_tokenizer.py BUILD_DIR VOCAB_DIR [GCIDE_DIR]", file=sys.stderr)
    print("tokenizer: 0 passed, 1 failed")
    sys.exit(2)
build, vocab = sys.argv[1], sys.argv[2]
for need in (os.path.join(vocab, "encoder.json"), os.path.join(vocab, "vocab.bpe"), os.path.join(build, "tokenize")):
    if not os.path.isfile(need):
        print(f"test_tokenizer: {need}: no such file (VOCAB_DIR holds the GPT-2 vocabulary; BUILD_DIR the built tools: make)",
              file=sys.stderr)
        print("tokenizer: 0 passed, 1 failed")
        sys.exit(1)
gcide_dir = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/dictd"
here = os.path.dirname(os.path.abspath(__file__))


def cpp_encode(texts):
    inp = "".join(t.hex() + "\n" for t in texts)
    out = subprocess.run([os.path.join(build, "tokenize"), "--vocab-dir", vocab, "--hex"], input=inp.encode(),
                         capture_output=True, check=True).stdout.decode()
    return [[int(x) for x in line.split()] for line in out.split("\n")[:len(texts)]]


def gcide_slice(n_entries, stride):
    """Every stride-th entry of GCIDE."""
    return entries(gcide_dir)[::stride][:n_entries]


ref = Reference(vocab)

# 1. the tricky-string table
got = cpp_encode(CASES)
for text, ids in zip(CASES, got):
    want = ref.encode(text)
    check(f"case {text[:40]!r}", ids == want, f"got {ids[:20]} want {want[:20]}")

# 1b. long pieces: the merge order of a long word (the heap-ordered merging must pick the same pair
# as a scan of every pair: lowest rank, leftmost on ties)
import random  # noqa: E402
rnd = random.Random(5)
long_cases = [b"a" * 3001, b"ab" * 1500, b"aab" * 700, b"9" * 2500, b"x" * 2 + b"yz" * 999, b"!" * 1777,
              "\u00e9".encode() * 900, bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(4000)),
              bytes(rnd.choice(b"ab") for _ in range(4000)), " ".join("w" * rnd.randint(50, 400) for _ in range(10)).encode()]
got = cpp_encode(long_cases)
for text, ids in zip(long_cases, got):
    want = ref.encode(text)
    check(f"long piece {text[:12]!r}... ({len(text)} bytes)", ids == want, f"got {len(ids)} ids, want {len(want)}")


# 2. a slice of GCIDE: 2000 entries spread over the whole dictionary
if os.path.exists(os.path.join(gcide_dir, "gcide.index")):
    docs = gcide_slice(2000, 60)
    got = cpp_encode(docs)
    bad = [i for i, (d, g) in enumerate(zip(docs, got)) if ref.encode(d) != g]
    check("gcide slice (2000 entries) equals reference", not bad, f"{len(bad)} entries differ, first {docs[bad[0]][:80]!r}" if bad else "")
    check("gcide slice is not trivially small", sum(len(g) for g in got) > 20000, str(sum(len(g) for g in got)))
else:
    check("gcide present (run scripts/setup.sh)", False)

# 3. tiktoken's own ids, recorded on a machine that has tiktoken
fixture = os.path.join(here, "fixtures", "tiktoken_gpt2.json")
if os.path.exists(fixture):
    with open(fixture) as f:
        fx = json.load(f)
    texts = [bytes.fromhex(c["hex"]) for c in fx["cases"]]
    got = cpp_encode(texts)
    bad = [i for i, (c, g) in enumerate(zip(fx["cases"], got)) if c["ids"] != g]
    check(f"tiktoken {fx['tiktoken_version']} fixture ({len(texts)} texts)", not bad,
          f"{len(bad)} differ, first {texts[bad[0]][:60]!r}" if bad else "")
    ref_bad = [i for i, c in enumerate(fx["cases"]) if ref.encode(texts[i]) != c["ids"]]
    check("reference agrees with tiktoken fixture", not ref_bad, f"{len(ref_bad)} differ" if ref_bad else "")
else:
    print("note: tests/fixtures/tiktoken_gpt2.json absent; tiktoken comparison skipped")

finish("tokenizer")
