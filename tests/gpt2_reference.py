"""A slow, independent GPT-2 tokenizer for tests: the pattern run by the `regex` module (a
different engine from the hand scanner in data/tokenizer.cpp) and tiktoken's merge rule written
as plainly as possible. \\s is spelled out as Unicode White_Space, which is what it means in
tiktoken's Rust regex engine (Python's \\s also takes U+001C..U+001F)."""
import json
import os

import regex

WS = r"\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^%s\p{L}\p{N}]+|[%s]+(?![^%s])|[%s]+"""
    % (WS, WS, WS, WS))


def byte_table():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Reference:
    def __init__(self, vocab_dir):
        u2b = byte_table()
        with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
            enc = json.load(f)
        self.ranks = {}
        for key, idx in enc.items():
            if idx == 50256:
                continue
            self.ranks[bytes(u2b[ch] for ch in key)] = idx

    def merge(self, piece):
        if piece in self.ranks:
            return [self.ranks[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while True:
            best, at = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return [self.ranks[p] for p in parts]

    def encode(self, data: bytes):
        text = data.decode("utf-8", errors="replace")
        ids = []
        for m in PATTERN.finditer(text):
            ids += self.merge(m.group(0).encode("utf-8"))
        return ids
