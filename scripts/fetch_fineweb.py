#!/usr/bin/env python3
"""Fetches the published pre-tokenized FineWeb shards (dataset kjj0/fineweb10B-gpt2): the val
shard fineweb_val_000000.bin and the first N train shards fineweb_train_000001.bin ... (100M
tokens, about 200 MB each). An interrupted download resumes where it stopped (HTTP Range, into
NAME.part); each finished download's header is checked (magic, version, token count against the
size, words 3 to 255 zero: scripts/shard_format.py) before it is renamed into place, and shards
already present and good are skipped. A local shard that is bad stays where it is until its
replacement has arrived and passed the check; a download that fails the check is kept as NAME.bad
and installs nothing.

    python3 scripts/fetch_fineweb.py 8                 # val + 8 train shards (the speedrun's 1480 steps)
    python3 scripts/fetch_fineweb.py 1 --out-dir DIR --base-url URL
"""
import argparse
import math
import os
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shard_format  # noqa: E402
from shard_format import ShardError  # noqa: E402
from tool_errors import run as run_tool  # noqa: E402

DEFAULT_URL = "https://huggingface.co/datasets/kjj0/fineweb10B-gpt2/resolve/main"


def check_shard(path):
    """Returns the token count, or raises ShardError naming the file and the fault (the header
    checked whole, as train_gpt checks it: scripts/shard_format.py)."""
    return shard_format.read_header(path)


def part_size(part):
    """The size of an earlier download's NAME.part, 0 when there is none; anything but a regular
    file there (a FIFO would block the download, a folder cannot be written, a symbolic link would
    write wherever it points) is refused, naming it."""
    import stat

    try:
        st = os.lstat(part)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode):
        kind = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file")
        raise ShardError(f"{part}: is {kind}, not a partial download; remove it and run again")
    return st.st_size


def download(url, dst, timeout, log):
    """Fetches url into dst.part (resuming it) and returns that path; dst itself is not touched."""
    part = dst + ".part"
    have = part_size(part)
    req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the part file is already whole
            return part
        raise
    with resp:
        if have and resp.status != 206:
            log(f"  server ignored the resume request; starting {os.path.basename(dst)} again")
            have = 0
        total = resp.headers.get("Content-Length")
        total = int(total) + have if total is not None else None
        got = have
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_APPEND if have else os.O_TRUNC)
        with os.fdopen(os.open(part, flags, 0o644), "ab" if have else "wb") as f:  # never through a link, never blocking on a FIFO
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                f.write(chunk)
                got += len(chunk)
                if total:
                    log(f"  {os.path.basename(dst)}: {got / 1e6:.0f}/{total / 1e6:.0f} MB", end="\r")
        log("")
        if total is not None and got != total:
            raise ShardError(f"{url}: connection closed at {got} of {total} bytes; run again to resume")
    return part


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("train_shards", type=int, nargs="?", default=8, help="number of train shards (default 8)")
    ap.add_argument("--out-dir", default="data/fineweb10B")
    ap.add_argument("--base-url", default=DEFAULT_URL)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds without data before giving up")
    args = ap.parse_args(argv)
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        ap.error(f"--timeout must be a number of seconds in (0, 3600], got {args.timeout}")
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        ap.error(f"--out-dir {args.out_dir}: exists and is not a folder")
    if not 0 <= args.train_shards <= 103:
        ap.error(f"train_shards must be between 0 and 103 (the published count), got {args.train_shards}")
    os.makedirs(args.out_dir, exist_ok=True)
    names = ["fineweb_val_%06d.bin" % 0] + ["fineweb_train_%06d.bin" % i for i in range(1, args.train_shards + 1)]
    quiet = not sys.stderr.isatty()

    def log(msg, end="\n"):
        if end == "\r" and quiet:
            return
        print(msg, end=end, file=sys.stderr, flush=True)

    for name in names:
        dst = os.path.join(args.out_dir, name)
        if os.path.exists(dst):
            try:
                n = check_shard(dst)
                log(f"{name}: present ({n} tokens)")
                continue
            except ShardError as e:
                log(f"{e}; fetching a replacement (the bad file stays until it arrives)")
        log(f"{name}: fetching")
        try:
            part = download(f"{args.base_url}/{name}", dst, args.timeout, log)
        except (urllib.error.URLError, OSError) as e:
            print(f"fetch_fineweb: error: {name}: {e}; run again to resume (offline?)", file=sys.stderr)
            return 1
        try:
            n = check_shard(part)
        except ShardError as e:
            os.replace(part, dst + ".bad")
            print(f"fetch_fineweb: error: {e}".replace(part, dst), file=sys.stderr)
            print(f"fetch_fineweb: kept the bad download as {dst}.bad; nothing was installed", file=sys.stderr)
            return 1
        os.replace(part, dst)  # the checked shard replaces whatever was there, in one step
        log(f"{name}: ok ({n} tokens)")
    print(f"fetch_fineweb: {len(names)} shards in {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_tool(main, "fetch_fineweb")
