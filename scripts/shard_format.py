"""The token shard's header (docs/formats.md), read and checked as data/shard.h's read_header does,
for every Python tool that reads shards: 256 little-endian int32, magic 20240520, version 1, the
token count n (at least 0, and the file holds exactly n uint16 ids after the header), then words
3 to 255, which are 0. A file that fails any of these is refused with a ShardError (a ToolError)
naming the file and the word or field at fault, in data/shard.h's words, so that a shard refused by
train_gpt is refused by the Python tools alike and none reads it as other tokens: the header
follows from the tokens, so a shard's SHA-256 (of the whole file) names its tokens.

Needs nothing outside the standard library (scripts/fetch_fineweb.py imports it without numpy)."""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, regular_file  # noqa: E402

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
HEADER_BYTES = HEADER_INTS * 4


class ShardError(ToolError):
    """A file that is not a token shard of this format: the message names it and the fault."""


def header_bytes(n):
    """The header of a shard of n tokens."""
    return struct.pack(f"<{HEADER_INTS}i", MAGIC, VERSION, n, *([0] * (HEADER_INTS - 3)))


def check_header(path, raw, size):
    """The token count of a shard whose first bytes are raw (its header, or fewer bytes when the
    file is shorter) and whose file holds size bytes; ShardError naming path and the fault."""
    if size < HEADER_BYTES or len(raw) < HEADER_BYTES:
        raise ShardError(f"{path}: file is {size} bytes, shorter than the {HEADER_BYTES}-byte shard header")
    words = struct.unpack(f"<{HEADER_INTS}i", raw[:HEADER_BYTES])
    if words[0] != MAGIC:
        raise ShardError(f"{path}: bad magic {words[0]} (expected {MAGIC}): not a token shard")
    if words[1] != VERSION:
        raise ShardError(f"{path}: unsupported version {words[1]} (expected {VERSION})")
    n = words[2]
    if n < 0:
        raise ShardError(f"{path}: negative token count {n}")
    for i in range(3, HEADER_INTS):
        if words[i] != 0:
            raise ShardError(f"{path}: header word {i} is {words[i]} (words 3 to 255 of the header are 0): "
                             "not a shard of this format")
    body = size - HEADER_BYTES
    if body != 2 * n:
        raise ShardError(f"{path}: header says {n} tokens ({2 * n} bytes) but the file holds {body} bytes after the header "
                         f"({'truncated' if body < 2 * n else 'trailing bytes'})")
    return n


def read_header(path):
    """The token count of the shard at path, its header checked whole against the file's size;
    ShardError naming the file and the fault (a FIFO or a folder is refused, never read)."""
    try:
        regular_file(path, "shard")
    except ToolError as e:
        raise ShardError(str(e)) from None
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise ShardError(f"{path}: cannot read the shard: {e.strerror}") from None
    return check_header(path, raw, size)
