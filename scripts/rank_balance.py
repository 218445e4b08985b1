#!/usr/bin/env python3
"""How unevenly the ranks of a data-parallel run share the attention's work, step by step, read
from the training shards themselves.

    python3 scripts/rank_balance.py TRAIN_PATTERN [--steps 11-30] [--gpus 2,4,8] [--window-blocks 8]
                                    [--seq-len 65536] [--seqs-per-step 8] [--count pairs|tiles]
                                    [--attention-ms MS]

The step waits for its slowest rank: the exchange after the backward starts when the last rank
gets there. The matmuls cost the same for every sequence, but the attention's work goes with the
documents a sequence holds, so ranks given other sequences finish at other times, and the excess
of the slowest rank over the mean is time that does not divide by the GPU count.

A sequence's attention work is counted as the (q, kv) pairs a causal window of W = 128 x
--window-blocks tokens keeps inside each of its documents: sum over i < n of min(i + 1, W) for a
document of n tokens (a document starts at token 50256, and at the sequence's first token). This
is a proxy: the kernels skip whole tiles, and the block-granular window keeps somewhat fewer pairs.
With --count tiles it is counted as the kernels visit it instead: for each block of 128 queries,
the blocks of 128 keys from the block of its first query's lower bound (the later of its
document's start and --window-blocks - 1 blocks back) up to its own block (attention/mask.h,
key_range).

Either count is work, not time. A balanced hand-out of these counts (train_gpt --balance-ranks)
took back much less of the step than the excess printed here (results/scaling/, "The ranks'
attention work differs").
The sequences are data/dataloader.h's: sequence k is the (seq_len + 1)-token window at k x seq_len
inside its shard (the shards in order, cycled; a shorter tail skipped), and at step s (1-based)
rank r of N at micro-step m takes sequence S (s - 1) + m N + r, S the sequences a step.

For each GPU count the script prints, over the steps, the median and mean excess of the slowest
rank's work over the mean rank's, as a share of a rank's attention work; and the same for the best
split of each step's sequences into N groups of S / N (the bound any assignment of the same
sequences to the ranks could reach). With --attention-ms (the one-GPU step's attention forward +
backward, from --profile) it prints the excess in ms a step too: MS / N times the share.
"""
import argparse
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shard_format import HEADER_BYTES, read_header  # noqa: E402
from tool_errors import ToolError, require, run  # noqa: E402
require("numpy")  # a message, not a traceback, without numpy
import numpy as np  # noqa: E402

BOS, VOCAB = 50256, 50257
MAX_SEQS_PER_STEP = 16  # the best split is searched exhaustively


def read_shard(path):
    """A shard's tokens (docs/formats.md: 256 little-endian int32 of header, then uint16 ids), its
    header checked whole as train_gpt checks it (scripts/shard_format.py)."""
    n = read_header(path)
    # mapped, not read into memory: the id check streams through it, the steps then page in their sequences
    tokens = np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(n,)) if n else np.zeros(0, np.uint16)
    if n and int(tokens.max()) >= VOCAB:
        raise ToolError(f"{path}: token id {int(tokens.max())} out of range (vocabulary {VOCAB})")
    return tokens


def window_pairs(tokens, window):
    """The pairs a causal window of `window` tokens keeps inside the documents of `tokens`."""
    starts = np.flatnonzero(tokens == BOS)
    bounds = np.concatenate(([0], starts[starts > 0], [len(tokens)])).astype(np.int64)
    n = np.diff(bounds)
    m = np.minimum(n, window)
    return int(np.sum(m * (m + 1) // 2 + (n - m) * window))


def window_tiles(tokens, blocks):
    """The 128 x 128 tiles the attention kernels visit for `tokens` under a causal window of
    `blocks` blocks (q / 128 - k / 128 < blocks) and the document mask."""
    n = len(tokens) // 128 * 128
    bos = tokens[:n] == BOS
    if n:
        bos[0] = True
    start = np.maximum.accumulate(np.where(bos, np.arange(n), 0))  # each position's document start
    qb = np.arange(n // 128)
    lo = np.maximum(qb - (blocks - 1), start[qb * 128] // 128)
    return int(np.sum(qb - lo + 1))


def best_split(work, groups):
    """The smallest possible largest group sum over splits of `work` into `groups` groups of equal
    size: with one item a group the largest item, with two the largest paired with the smallest
    (no other pairing has a smaller largest pair), else branch and bound, the largest items first."""
    items = sorted(work, reverse=True)
    size = len(items) // groups
    if size == 1:
        return items[0]
    if size == 2:
        return max(items[i] + items[-1 - i] for i in range(groups))
    best = [float(sum(items))]
    sums, counts = [0] * groups, [0] * groups

    def place(i):
        if i == len(items):
            best[0] = min(best[0], max(sums))
            return
        tried = set()
        for g in range(groups):
            if counts[g] == size or (sums[g], counts[g]) in tried or sums[g] + items[i] >= best[0]:
                continue
            tried.add((sums[g], counts[g]))  # groups alike so far lead to the same splits
            sums[g] += items[i]
            counts[g] += 1
            place(i + 1)
            sums[g] -= items[i]
            counts[g] -= 1

    place(0)
    return best[0]


def parse_steps(text):
    parts = text.split("-")
    if len(parts) != 2 or not all(re.fullmatch(r"[0-9]{1,7}", p) for p in parts):
        raise ToolError(f"--steps: want FIRST-LAST (1-based, e.g. 11-30), got {text!r}")
    first, last = int(parts[0]), int(parts[1])
    if not 1 <= first <= last <= 1_000_000:
        raise ToolError(f"--steps: want 1 <= FIRST <= LAST <= 1000000, got {text!r}")
    return first, last


def main():
    p = argparse.ArgumentParser(prog="rank_balance", description=__doc__.split("\n\n")[0])
    p.add_argument("train", help="the training shards' pattern, quoted (e.g. 'data/synthetic/synth_train_*.bin')")
    p.add_argument("--steps", default="11-30", help="the steps, 1-based FIRST-LAST (default: the timed steps of 30)")
    p.add_argument("--gpus", default="2,4,8", help="GPU counts, comma-separated; each divides --seqs-per-step")
    p.add_argument("--window-blocks", type=int, default=8, help="the attention window in blocks of 128 tokens")
    p.add_argument("--seq-len", type=int, default=65536, help="tokens a sequence")
    p.add_argument("--seqs-per-step", type=int, default=8, help=f"sequences a step (at most {MAX_SEQS_PER_STEP})")
    p.add_argument("--count", choices=["pairs", "tiles"], default="pairs",
                   help="a sequence's work: the kept (q, kv) pairs, or the 128 x 128 tiles the kernels visit")
    p.add_argument("--attention-ms", type=float, help="the one-GPU step's attention forward + backward, ms (--profile)")
    a = p.parse_args()
    if not 1 <= a.window_blocks <= 1_000_000:
        p.error("--window-blocks must be from 1 to 1000000")
    if not 1 <= a.seq_len <= 1 << 24:
        p.error("--seq-len must be from 1 to 16777216")
    if a.count == "tiles" and a.seq_len % 128:
        p.error("--count tiles: --seq-len must be a multiple of 128 (the kernels' tiles)")
    if not 1 <= a.seqs_per_step <= MAX_SEQS_PER_STEP:
        p.error(f"--seqs-per-step must be from 1 to {MAX_SEQS_PER_STEP}")
    if a.attention_ms is not None and not 0 < a.attention_ms < 1e7:
        p.error("--attention-ms must be above 0 and below 10000000")
    try:
        counts = [int(x) for x in a.gpus.split(",")]
    except ValueError:
        p.error(f"--gpus: want GPU counts separated by commas, got {a.gpus!r}")
    for n in counts:
        if n < 1 or a.seqs_per_step % n:
            p.error(f"--gpus: {n} does not divide the {a.seqs_per_step} sequences a step")
    if len(set(counts)) != len(counts):
        p.error("--gpus: a count is listed twice")
    first, last = parse_steps(a.steps)

    files = sorted(glob.glob(a.train), key=os.fsencode)  # by bytes, as data/shard.h sorts them
    if not files:
        raise ToolError(f"{a.train}: no shard matches")
    T, S, W = a.seq_len, a.seqs_per_step, 128 * a.window_blocks
    shards = [read_shard(f) for f in files]
    per_shard = [(len(t) - 1) // T if len(t) > T else 0 for t in shards]
    total = sum(per_shard)
    if total == 0:
        raise ToolError(f"{a.train}: no shard holds a sequence of {T} + 1 tokens")

    def sequence(k):
        k %= total
        for t, c in zip(shards, per_shard):
            if k < c:
                return t[k * T:k * T + T]  # (the target token after the window is not attended)
            k -= c

    per_seq = {}  # a sequence's work, by its place in the cycled stream (the steps repeat it)

    def work(k):
        k %= total
        if k not in per_seq:
            seq = sequence(k)
            per_seq[k] = window_pairs(seq, W) if a.count == "pairs" else window_tiles(seq, a.window_blocks)
        return per_seq[k]

    steps = range(first, last + 1)
    values = np.fromiter((work(S * (s - 1) + i) for s in steps for i in range(S)), dtype=np.float64)
    print(f"{len(files)} shard(s), {total} sequences of {T} tokens; steps {first}-{last}, {S} sequences a step; "
          f"window {W} tokens")
    print(f"a sequence's attention {a.count}: mean {values.mean():.4g}, coefficient of variation {100 * values.std() / values.mean():.2f}%")
    ms_head = "  excess ms a step (as run, best split)" if a.attention_ms else ""
    print(f"\n{'GPUs':>4} {'a rank':>7}   slowest rank over the mean, as run: median   mean   best split: median   mean{ms_head}")
    best = {}  # a step's best split, by its sorted work (the steps repeat once the data cycles)
    for n in counts:
        run_excess, best_excess = [], []
        for s in steps:
            v = [int(values[S * (s - first) + i]) for i in range(S)]
            ranks = [sum(v[m * n + r] for m in range(S // n)) for r in range(n)]
            mean = sum(v) / n
            run_excess.append(max(ranks) / mean - 1)
            key = (n, tuple(sorted(v)))
            if key not in best:
                best[key] = best_split(v, n)
            best_excess.append(best[key] / mean - 1)
        line = (f"{n:>4} {S // n:>7}   {100 * np.median(run_excess):>41.2f}% {100 * np.mean(run_excess):>5.2f}%"
                f" {100 * np.median(best_excess):>20.2f}% {100 * np.mean(best_excess):>5.2f}%")
        if a.attention_ms:
            share = a.attention_ms / n
            line += f"  {share * np.median(run_excess):>12.2f}, {share * np.median(best_excess):.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    run(main, "rank_balance")
