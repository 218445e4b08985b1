#!/usr/bin/env python3
"""A model of the fused sm90 backward's grid under the causal mask without a window or documents.

The grid goes head by head (attention/tile_scheduler.cuh key_block_at). Key block kb (128 keys)
walks the query tiles of 64 from 2 kb to the last, one tile a step; the GPU starts blocks in
index order on the first free SM. A block adds its dQ share of a tile one step after computing
it, once the share before its own in the tile's order is counted, which happens `delay` steps
after that share was added (attention/dq_order.cuh). Each block also costs `overhead` steps
(its start and end). The model prints how much longer the grid takes than its work spread
evenly over the SMs (SMs x makespan / work - 1), for two orders:
  decreasing: every head adds dQ by decreasing key block, takes its key blocks from the last one
              down and walks up (the order before the rising last head);
  rising last head: the same, but the last head (with more than one head) adds by increasing key
              block, takes its key blocks from the first one up and walks down (the kernel's).
`--noise` draws each step's cost uniformly from 1 +- noise. A model: it leaves out the clock,
which rises when SMs fall idle, so the kernel gains less than it predicts (results/attention_design/README.md,
The order blocks take their work).

  python3 bench/bwd_schedule_model.py --T 16384 --heads 16
"""
import argparse
import heapq
import random
import sys


def simulate(n_kb, heads, rising_last, sms=132, overhead=3.0, delay=1.0, noise=0.0, seed=0):
    rnd = random.Random(seed)
    n_q = 2 * n_kb
    rising = [rising_last and heads > 1 and h == heads - 1 for h in range(heads)]
    order = [(h, i if rising[h] else n_kb - 1 - i) for h in range(heads) for i in range(n_kb)]
    counted = {}  # (h, kb, tile): when the share is counted
    free = [0.0] * sms
    heapq.heapify(free)
    end = work = 0.0
    for h, kb in order:
        start = heapq.heappop(free)
        o = overhead * (1 + noise * (2 * rnd.random() - 1))
        t = start + o / 2
        work += o
        tiles = range(n_q - 1, 2 * kb - 1, -1) if rising[h] else range(2 * kb, n_q)
        for q in tiles:
            c = 1 + noise * (2 * rnd.random() - 1)
            t += c
            work += c
            prev = (kb - 1) if rising[h] else (kb + 1 if kb + 1 <= q // 2 else None)
            if prev is not None and prev >= 0:
                t = max(t, counted[(h, prev, q)])  # started earlier: always known
            counted[(h, kb, q)] = t + delay
        end = max(end, t + o / 2)
        heapq.heappush(free, t + o / 2)
    return sms * end / work - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=16384, help="tokens (a multiple of 128)")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--overhead", type=float, default=3.0, help="steps a block costs besides its tiles")
    ap.add_argument("--delay", type=float, default=1.0, help="steps from a share's addition to its count")
    ap.add_argument("--noise", type=float, default=0.0, help="a step costs 1 +- noise (0 to 0.9)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.T < 128 or a.T % 128:
        ap.error(f"--T {a.T}: give a positive multiple of 128")
    if not 1 <= a.heads <= 64 or a.T // 128 * a.heads > 20000:
        ap.error(f"--heads {a.heads}: give 1 to 64 heads, at most 20000 blocks in all")
    if not 1 <= a.sms <= 100000:
        ap.error(f"--sms {a.sms}: give 1 to 100000")
    if not (0 <= a.overhead <= 1e6 and 0 <= a.delay <= 1e6):  # (NaN fails both)
        ap.error("--overhead and --delay: give 0 to 1000000 steps")
    if not 0 <= a.noise <= 0.9:
        ap.error(f"--noise {a.noise}: give 0 to 0.9")
    n_kb = a.T // 128
    kw = dict(sms=a.sms, overhead=a.overhead, delay=a.delay, noise=a.noise, seed=a.seed)
    dec, ris = simulate(n_kb, a.heads, False, **kw), simulate(n_kb, a.heads, True, **kw)
    print(f"T {a.T}, {a.heads} heads, {a.sms} SMs: over an even spread, decreasing {100 * dec:.1f}%, "
          f"rising last head {100 * ris:.1f}%; kernel time {100 * ((1 + ris) / (1 + dec) - 1):+.1f}%")


if __name__ == "__main__":
    main()
