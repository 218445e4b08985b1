"""A model of the Hopper GEMM's ring protocol (gemm/gemm_sm90.cuh with the epilogues of
gemm/epilogue_relu2.cuh and gemm/epilogue_store.cuh), run under random schedules on the CPU, so
that the protocol's rules (gemm/config.cuh) are checked where no GPU is.

    python3 tests/test_gemm_ring_model.py [--runs N]

What is modelled, as the kernel does it:
  a cluster of two blocks, each with one producer and two consumer warpgroups;
  a ring of 4 stages with a full and an empty mbarrier each. An mbarrier counts pending arrivals
    and transaction units; its phase completes when both reach zero, and a wait names a phase by
    its parity alone (mbarrier.try_wait.parity passes while the barrier's current phase has the
    other parity), as on the hardware;
  the producer: for each tile, its K-slices (its own A, its half of B, and the peer's half of B,
    multicast into both blocks), then the epilogue's slots (the ReLU^2 backward's r, one a
    warpgroup, its own loads only). Loads land in any order, at any later time, the slots' (from
    HBM) mostly after the slices' (from L2);
  the consumers: a slice's wait, its release (four warps' arrivals, here and in the peer block)
    after the next slice's wgmmas; the epilogues' waits, holds and releases; named barriers as
    the hardware counts them (arrivals of 128 threads a warpgroup; a barrier completes at 256).
What is checked, in every schedule:
  a consumer passing a full barrier's wait finds the entry it waits for landed there (not an
    older one: a stale phase), and reads no entry whose loads are still in flight;
  no mbarrier takes more arrivals than its phase still expects;
  no load lands in a stage that a consumer still reads (an early release);
  no named barrier completes without the warpgroup that syncs on it (a second arrival);
  every schedule ends (no hang: nothing can move while work is left).
The protocols: "now", as the kernels are, must pass every schedule, and so must "after-store" (the
backward's earlier ordering, which waited for the other's slot right after the store rather than
at the next tile's first slice) and "slot-barriers" (a candidate, not in the kernels: the producer
counts each slot's bytes on a barrier of its owner warpgroup's, two a warpgroup by the tile's
parity, and the ring's
phase of a slot completes at the producer's arrival, so that the other warpgroup's wait for it
costs nothing); "before" (the ReLU^2 backward
whose warpgroups waited only for their own slot, the held stage's handoff on one pair of named
barriers) and "release-for-all" (each warpgroup also waits for the other's slot, but the storer
still releases its slot for all eight warps) must each be caught in some schedule, which shows
that the model can see the races the GPU showed: the default job's crash, the K = 64 forward's
hang, and the hang of that first fix; so must "one-slot-barrier" (the candidate with one slot
barrier a warpgroup, armed for the next tile while this tile's bytes are still in flight).
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import check, finish  # noqa: E402

S = 4  # stages (gemm/config.cuh Shape::kStages)
WARPS = 4  # a warpgroup's warps, each releasing for itself


class Failure(Exception):
    pass


class MBarrier:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.tx, self.phase = name, count, count, 0, 0
        self.queue, self.landed = [], None  # entries whose phases are under way, in order; the last completed

    def arrive(self, n=1):
        if n > self.pending:
            raise Failure(f"{self.name}: {n} arrivals where its phase expects {self.pending} more")
        self.pending -= n
        self._complete()

    def complete_tx(self, n):
        self.tx -= n
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count
            if self.queue:
                self.landed = self.queue.pop(0)

    def passes(self, parity):  # mbarrier.try_wait.parity
        return (self.phase & 1) != parity


class NamedBarrier:
    def __init__(self, name):
        self.name, self.count, self.generation, self.syncing = name, 0, 0, 0

    def add(self, threads, sync):
        self.count += threads
        self.syncing += sync
        if self.count >= 256:
            if not self.syncing:
                raise Failure(f"{self.name} completed without the warpgroup that syncs on it (a second arrival)")
            self.count -= 256
            self.generation += 1
            self.syncing = 0


def simulate(kind, protocol, nk, tiles, seed, max_steps=40000):
    """One schedule; returns None when it ends well, else what went wrong."""
    rng = random.Random(seed)
    slots = 2 if kind == "backward" else 0
    per_tile = nk + slots
    full = [[MBarrier(f"block {b} full[{s}]", 1) for s in range(S)] for b in range(2)]
    empty = [[MBarrier(f"block {b} empty[{s}]", 2 * 2 * WARPS) for s in range(S)] for b in range(2)]
    named = [{} for _ in range(2)]
    reading = [[set() for _ in range(S)] for _ in range(2)]  # (wg, entry) holding each stage
    held_done = [[-1, -1] for _ in range(2)]  # the last tile whose wgmmas each warpgroup has finished
    # "slot-barriers" only: two a warpgroup, by the tile's parity (one would be armed for the next tile
    # while this tile's bytes are still in flight: an arrival its phase does not expect)
    nsb = 1 if protocol == "one-slot-barrier" else 2
    slot_full = [[[MBarrier(f"block {b} slot_full[{w}][{p}]", 1) for p in range(2)] for w in range(2)] for b in range(2)]
    inflight = []  # (block, stage, units, step from which it may land, its barrier, its entry) loads not landed
    clock = [0]

    def nbar(b, i):
        return named[b].setdefault(i, NamedBarrier(f"block {b} named barrier {i}"))

    def load(b, s, entry, units, slow=False, bar=None):
        if any(e != entry for _, e in reading[b][s]):
            raise Failure(f"block {b} stage {s}: entry {entry} loaded while entry {sorted(reading[b][s])} is still read")
        inflight.append((b, s, units, clock[0] + rng.randrange(300 if slow else 10), bar or full[b][s], entry))

    def producer(b):
        it = 0
        for t in range(tiles):
            for kb in range(per_tile):
                s = it % S
                while it >= S and not empty[b][s].passes((it // S - 1) & 1):
                    yield
                full[b][s].queue.append(it)
                # mbarrier.arrive.expect_tx: the bytes expected, then the arrival, at once (a peer's
                # multicast may land before it: the count of bytes goes below zero meanwhile)
                own_bar = kb >= nk and protocol in ("slot-barriers", "one-slot-barrier")  # the slot's bytes counted on a barrier of its own
                full[b][s].tx += 3 if kb < nk else 0 if own_bar else 2
                full[b][s].arrive()
                if kb < nk:  # A and this block's half of B; its half of B into the peer too (multicast)
                    load(b, s, it, 2)
                    load(b ^ 1, s, it, 1)
                elif own_bar:  # the ring's phase completes at once; the slot's own barrier waits for the bytes
                    sf = slot_full[b][kb - nk][t % nsb]
                    sf.queue.append(it)
                    sf.tx += 2
                    sf.arrive()
                    load(b, s, it, 2, slow=True, bar=sf)
                else:  # a slot: r for warpgroup kb - nk, this block's loads only, from HBM (slower than L2's slices)
                    load(b, s, it, 2, slow=True)
                it += 1
                yield

    def consumer(b, wg):
        def wait_full(i, hold=True):
            s = i % S
            while not full[b][s].passes((i // S) & 1):
                yield
            if full[b][s].landed != i:
                raise Failure(f"block {b} warpgroup {wg} passed the wait for entry {i} on a stale phase "
                              f"(stage {s} holds entry {full[b][s].landed})")
            if hold:
                hold_entry(s, i)

        def hold_entry(s, i):
            if any(x[:2] == (b, s) and x[5] == i for x in inflight):
                raise Failure(f"block {b} warpgroup {wg} reads entry {i} in stage {s} before its data has landed")
            reading[b][s].add((wg, i))

        def release(i, warps=WARPS, stop_reading=True):
            s = i % S
            if stop_reading:
                reading[b][s].discard((wg, i))
            empty[b][s].arrive(warps)
            empty[b ^ 1][s].arrive(warps)

        def named_sync(i):
            bar = nbar(b, i)
            gen = bar.generation
            bar.add(128, 1)
            while bar.generation == gen:
                yield

        held = lambda who, ti: 3 + who + (2 * (ti & 1) if protocol == "now" else 0)  # noqa: E731
        for ti in range(tiles):
            it0 = ti * per_tile
            for kb in range(nk):
                yield from wait_full(it0 + kb)
                yield  # the slice's wgmmas issued
                if kb == 0 and ti > 0:
                    if kind == "backward":  # the storer: the previous tile's slot, once its store has read it
                        slot = it0 - per_tile + nk + wg
                        release(slot, 2 * WARPS if protocol in ("before", "release-for-all") else WARPS)
                        if protocol in ("before", "release-for-all"):  # released for the other warpgroup too
                            reading[b][slot % S].discard((1 - wg, slot))
                        if protocol == "now":  # then the other's slot, waited for and released for this warpgroup
                            other = it0 - per_tile + nk + 1 - wg
                            yield from wait_full(other, hold=False)
                            release(other, stop_reading=False)
                    else:  # the held stage of the previous tile, for this warpgroup's warps
                        release(it0 - 1)
                yield  # the previous slice's wgmmas done
                if kb > 0:
                    release(it0 + kb - 1)
            yield  # every wgmma of the tile done
            if kind == "backward":
                release(it0 + nk - 1)
                mine, other = it0 + nk + wg, it0 + nk + 1 - wg
                if protocol in ("slot-barriers", "one-slot-barrier"):  # the ring's phase, then the slot's own barrier
                    yield from wait_full(mine, hold=False)
                    sf = slot_full[b][wg][ti % nsb]
                    while not sf.passes((ti // nsb) & 1):
                        yield
                    if sf.landed != mine:
                        raise Failure(f"block {b} warpgroup {wg} passed its slot's wait for entry {mine} on a stale phase")
                    hold_entry(mine % S, mine)
                else:
                    yield from wait_full(mine)
                yield  # du over r, stored from the slot (released at the next tile's first slice)
                if protocol in ("after-store", "release-for-all", "slot-barriers", "one-slot-barrier"):  # the other's slot now, not at the next tile
                    yield from wait_full(other, hold=False)
                    if protocol != "release-for-all":
                        release(other, stop_reading=False)
            else:
                held_done[b][wg] = ti
                nbar(b, held(1 - wg, ti)).add(128, 0)  # hold_last_stage: the other may write there
                yield  # round 0, through the warpgroup's own buffer
                yield from named_sync(held(wg, ti))
                if held_done[b][1 - wg] < ti:
                    raise Failure(f"block {b} warpgroup {wg} wrote round 1 of tile {ti} into the held stage "
                                  f"while the other's wgmmas still read it")
                yield  # round 1 written and stored from the held stage

    actors = [producer(0), producer(1)] + [consumer(b, w) for b in range(2) for w in range(2)]
    weight = [rng.choice((1, 1, 3, 12)) for _ in actors]  # some actors far slower than others
    alive = list(range(len(actors)))
    try:
        for _ in range(max_steps):
            if not alive and not inflight:
                return None
            clock[0] += 1
            ready = [i for i, x in enumerate(inflight) if x[3] <= clock[0]]
            choices = [a for a in alive for _ in range(weight[a])] + (["load"] * rng.choice((1, 3, 10)) if ready else [])
            if not choices:
                continue
            c = rng.choice(choices)
            if c == "load":  # a load whose time has come lands, in any order
                _, _, units, _, bar, _ = inflight.pop(rng.choice(ready))
                bar.complete_tx(units)
                continue
            try:
                next(actors[c])
            except StopIteration:
                alive.remove(c)
        return f"no progress after {max_steps} steps (a hang)"
    except Failure as e:
        return str(e)


def sweep(kind, protocol, runs):
    """(schedules run, the first failure found, schedules that failed)"""
    n, failures, first = 0, 0, None
    for nk in (1, 2, 3, 4, 6):
        for tiles in (1, 2, 3, 5):
            for seed in range(runs):
                n += 1
                why = simulate(kind, protocol, nk, tiles, seed)
                if why:
                    failures += 1
                    first = first or f"K-slices {nk}, tiles {tiles}, schedule {seed}: {why}"
    return n, first, failures


ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--runs", type=int, default=60, help="schedules for each K-slice count and tile count (default 60)")
a = ap.parse_args()
if not 1 <= a.runs <= 100000:
    ap.error("--runs must be 1 to 100000")
for kind in ("backward", "forward"):
    n, first, failed = sweep(kind, "now", a.runs)
    check(f"the {kind} protocol as the kernels are: {n} schedules, none fails", first is None, first)
    print(f"  {kind}, now: {n} schedules, {failed} failed", flush=True)
for protocol, what in (("after-store", "the backward's earlier ordering (the other's slot waited for right after the store)"),
                       ("slot-barriers", "a candidate not built: each slot's bytes on a barrier of its own warpgroup, the "
                                         "ring's phase of a slot complete at once, so the other's wait costs nothing")):
    n, first, failed = sweep("backward", protocol, a.runs)
    check(f"{what} passes too: {n} schedules", first is None, first)
    print(f"  backward, {protocol}: {n} schedules, {failed} failed", flush=True)
for kind, protocol, what in (("backward", "before", "the default job's crash: a warpgroup passes the wait for its next slice on "
                                                    "the other's slot's stale phase"),
                             ("backward", "release-for-all", "the first fix's hang: a slot released for a warpgroup that has "
                                                             "not waited for it"),
                             ("forward", "before", "the K < 256 forward's hang: a second arrival on the held stage's barrier"),
                             ("backward", "one-slot-barrier", "the candidate with one slot barrier a warpgroup: armed for "
                                                              "the next tile while this tile's bytes are in flight")):
    n, first, failed = sweep(kind, protocol, a.runs)
    check(f"the model catches {what} ({kind}, {protocol})", first is not None, f"{n} schedules, none failed")
    print(f"  {kind}, {protocol}: {failed} of {n} schedules caught; first: {first}", flush=True)
finish("gemm-ring-model")
