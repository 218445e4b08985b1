#!/usr/bin/env python3
"""The step of train_gpt on N GPUs, predicted from a one-GPU run and the measured bandwidth of the
collectives, checked against measured N-GPU runs, and forecast for more GPUs and hosts.

    python3 scripts/scaling_model.py --one RUN_1GPU.jsonl --bandwidth BW.json [BW.json ...]
                                     [--check RUN_NGPU.jsonl ...] [--allow-differ gpu] [--gpus-per-host 8] [--links 400,100]

--one: the JSON-lines log of a one-GPU run (--grad-sync end, the default): its median step and the
optimiser's time, whose sum is what the model takes from it. --bandwidth: bench/collective_bandwidth.py's
JSON, one file for each rank count measured; the largest count measured stands for more GPUs of one host.
--check: N-GPU runs of the same card and model shape as --one (COMPARED below: a run of another
card or shape is refused, naming what differs, since the model would count that difference as its
error; --allow-differ KEY compares them anyway, and the output's first line then names it); so is
a --bandwidth file whose device is not the card of the runs compared (--allow-differ gpu). Every
number read from these files is checked (type, finite, in range) and a refusal names file and field.

The model, for the default exchange (after the backward: train/optimizer.cuh, train/shard_plan.h):
    step(N) = (step(1) - opt(1)) / N + opt(1) / N + exchange(N)
  - the forward and backward divide by N: each rank runs 8 / N of the 8 micro-steps;
  - the optimiser divides by N: each rank updates a 1/N share (its part that runs beside the
    exchange is not subtracted: a bound on the exposed time);
  - exchange(N) = each rank's bus bytes over the bus bandwidth: a reduce-scatter of the fp32
    gradients (4 bytes a parameter, 2 with --grad-exchange bf16), (N - 1) / N on every rank, and
    what the next step's forward waits for of the all-gather of the bf16 weights (2 bytes): with
    --gather-wait layer on the copy engines (the defaults) the forward reads each layer's weights
    as they arrive, so the all-gather hides behind the first micro-step's forward (a third of a
    micro-step) and only what outlasts it counts; otherwise (--gather-wait step, the all-gathers
    as kernels, whose SMs the forward's matmuls wait for, and runs from before these flags) all
    of it, a bound.
Across H hosts the collectives' bus bandwidth is the slower of NVLink's and the network's: a link
of L Gb/s a GPU carries about 0.9 L / 8 GB/s (NCCL's rings cross it once a GPU). With
--grad-sync overlap an exchange of W ms may hide behind the last micro-step's backward, about two
thirds of a micro-step; with --grad-sync embeddings only the share of the head's and the value
embeddings' bytes (those final while a layer's backward still follows) may. The forecast gives
both, each with a tenth of the exchange it runs beside the backward added back for the contention
for the GPU's SMs. On one host that contention made both slower than the default, so there the
bounds are not reached; over a network transport the embeddings bound held (results/grad_sync/,
results/scaling/).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ToolError, checked, field, read_json, read_json_lines, record, run, within  # noqa: E402

LINK_EFFICIENCY = 0.9  # the share of a network link NCCL's collectives reach
MAX_MS = 1e7           # a step or optimiser time above this (about 3 hours) is no measurement of a step
MAX_GBS = 1e5          # a bus bandwidth above this (GB/s) is no measurement
MAX_GPUS = 65536
ABSENT = "(absent)"  # a compared entry that a file does not hold (differs from any value)
# what a --check run must share with the --one run for their times to be compared: the model's
# shape, the work a step does, and the card (the config's entries, train/options.cpp)
COMPARED = ("gpu", "vocab", "width", "layers", "heads", "hidden", "seq_len", "seqs_per_step", "window_blocks",
            "window_mask", "window_granularity", "causal", "doc_mask", "prefix_tokens", "prefix_attention")


def read_run(path):
    """(config, summary) of a train_gpt JSON-lines log, the numbers the model takes checked."""
    config = summary = None
    for where, e in read_json_lines(path, "train_gpt JSON-lines log", 1_000_000):
        if not isinstance(e, dict):
            continue
        if e.get("event") == "config":
            config = e
        elif e.get("event") == "summary":
            summary = e
    if config is None or summary is None:
        raise ToolError(f"{path}: no configuration or no summary event: a train_gpt run that finished its timed steps is needed")
    where = f"{path}: the summary"
    step = field(summary, "median_step_ms", where, float, 0, MAX_MS, above=0)
    opt = field(summary, "optimizer_ms", where, float, 0, MAX_MS)
    if opt > step:
        raise ToolError(f"{where}: optimizer_ms {opt:g} is more than median_step_ms {step:g}: not one step's parts")
    where = f"{path}: the configuration"
    shape = {k: field(config, k, where, int, lo, hi) for k, lo, hi in
             (("vocab", 1, 1 << 20), ("width", 8, 16384), ("layers", 2, 256), ("hidden", 8, 65536))}
    shape["world_size"] = field(config, "world_size", where, int, 1, MAX_GPUS, default=1)
    for k, default in (("grad_sync", "end"), ("grad_exchange", "fp32"), ("gather_wait", "step"), ("gather_engine", "kernels")):
        shape[k] = field(config, k, where, str, default=default)
    return dict(config, **shape), {"median_step_ms": step, "optimizer_ms": opt}


def parameters(config):
    """The parameter count of the run's model (model/config.cpp's layout, gaps aside)."""
    V, C, L, F = (config[k] for k in ("vocab", "width", "layers", "hidden"))
    return V * C * (1 + L // 2) + L * (4 * C * C + 2 * C * F + 4) + L // 2 + C * V


def early_share(config):
    """The share of the parameters whose exchange --grad-sync embeddings runs during the backward:
    the head and value_embed.1 .. L/2-1 (train/shard_plan.h sync_point)."""
    V, C, L = (config[k] for k in ("vocab", "width", "layers"))
    return V * C * (1 + max(0, L // 2 - 1)) / parameters(config)


def read_bandwidth(path):
    """(ranks, reduce-scatter GB/s, all-gather GB/s, device) of bench/collective_bandwidth.py's JSON;
    device is the card it was measured on, ABSENT when the file names none."""
    d = record(read_json(path, "bandwidth file"), path, "bench/collective_bandwidth.py's JSON object")
    ranks = field(d, "ranks", path, int, 1, MAX_GPUS)
    device = field(d, "device", path, str, default=ABSENT)
    results = field(d, "results", path, list)
    bw = {}
    for i, r in enumerate(results):
        where = f"{path}: results[{i}]"
        r = record(r, where)
        op = field(r, "op", where, str).split()
        if op and op[0] in ("reduce-scatter", "all-gather"):
            if op[0] in bw:  # the bench measures each once: which of two would the model take?
                raise ToolError(f"{where}: a second {op[0]} entry: bench/collective_bandwidth.py measures each collective once")
            bw[op[0]] = field(r, "busbw_GBs", where, float, 0, MAX_GBS, above=0)
    missing = [k for k in ("reduce-scatter", "all-gather") if k not in bw]
    if missing:
        raise ToolError(f"{path}: results: no {' or '.join(missing)} entry (bench/collective_bandwidth.py measures both)")
    return ranks, bw["reduce-scatter"], bw["all-gather"], device


def differences(c, one, allow):
    """[(key, this run's value, the one-GPU run's)] of the COMPARED entries that differ."""
    return [(k, c.get(k, ABSENT), one.get(k, ABSENT)) for k in COMPARED
            if k not in allow and c.get(k, ABSENT) != one.get(k, ABSENT)]


def other_cards(bws, paths, runs):
    """[(bandwidth file, its device, a run's card)] for each card of the runs (their config's gpu)
    that a bandwidth file was not measured on: its exchange times would be another card's."""
    cards = sorted({c.get("gpu", ABSENT) for c in runs}, key=str)
    return [(p, b[3], card) for p, b in zip(paths, bws) for card in cards if b[3] != card]


def main():
    p = argparse.ArgumentParser(prog="scaling_model", description=__doc__.split("\n\n")[0])
    p.add_argument("--one", required=True, help="a one-GPU run's JSON-lines log")
    p.add_argument("--bandwidth", required=True, nargs="+", help="bench/collective_bandwidth.py's JSON, one a rank count")
    p.add_argument("--check", nargs="+", default=[], help="N-GPU runs' JSON-lines logs to compare with the prediction")
    p.add_argument("--gpus-per-host", type=int, default=8)
    p.add_argument("--links", default="400,100", help="network link speeds to forecast, Gb/s a GPU, comma-separated")
    p.add_argument("--allow-differ", action="append", default=[], metavar="KEY", choices=COMPARED,
                   help="compare --check runs that differ from --one in this configuration entry (the card: gpu; "
                        "repeatable); the output's first line names the difference")
    p.add_argument("--tolerance", type=float, default=0.03, help="largest relative error of a --check run (exit 1 beyond it)")
    a = p.parse_args()
    if not 1 <= a.gpus_per_host <= 64:
        p.error("--gpus-per-host must be between 1 and 64")
    if not 0 < a.tolerance < 1:
        p.error("--tolerance must be between 0 and 1")
    try:
        links = [float(x) for x in a.links.split(",")]
    except ValueError:
        p.error(f"--links: want numbers separated by commas, got {a.links!r}")
    if not links or not all(0 < x <= 1e5 for x in links):
        p.error("--links: each speed must be above 0 and at most 100000 Gb/s")

    config, one = read_run(a.one)
    if config["world_size"] != 1:
        raise ToolError(f"{a.one}: a run on {config['world_size']} GPUs; --one takes a one-GPU run")
    P = parameters(config)
    step1, opt1 = one["median_step_ms"], one["optimizer_ms"]
    compute1 = step1 - opt1
    bw_paths, bws = zip(*sorted(((f, read_bandwidth(f)) for f in a.bandwidth), key=lambda fb: fb[1][:3]))
    for i in range(1, len(bws)):
        if bws[i][0] == bws[i - 1][0]:
            raise ToolError(f"--bandwidth {bw_paths[i - 1]} and {bw_paths[i]}: two files of the same rank count ({bws[i][0]}); "
                            "give one a rank count")
    checks, allowed = [], []
    for path in a.check:  # every run read and compared before anything is printed
        c, s = read_run(path)
        if c["grad_sync"] != "end" or c["grad_exchange"] != "fp32":
            raise ToolError(f"{path}: the model is of the default exchange (--grad-sync end, fp32 gradients)")
        diff = differences(c, config, a.allow_differ)
        if diff:
            raise ToolError(f"{path}: not comparable with --one {a.one}: " + "; ".join(f"{k} {v!r} where --one has {w!r}"
                            for k, v, w in diff) + " (the model's error would be that difference; --allow-differ KEY "
                            "compares them anyway)")
        allowed += [f"{os.path.basename(path)} {k} {v!r} where --one has {w!r}"
                    for k, v, w in differences(c, config, ()) if k in a.allow_differ]
        checks.append((path, c, s))
    if checks:  # the bandwidth, too, must be the compared runs' card's
        runs = [config] + [c for _, c, _ in checks]
        other = other_cards(bws, bw_paths, runs)
        if other and "gpu" not in a.allow_differ:
            raise ToolError("--bandwidth " + "; ".join(f"{p} device {d!r} where the runs have gpu {card!r}" for p, d, card in other) +
                            ": measured on another card than the runs compared (the model's error would be that difference; "
                            "--allow-differ gpu compares them anyway)")
        allowed += [f"{os.path.basename(p)} device {d!r} where the runs have gpu {card!r}" for p, d, card in other]
    if allowed:  # the report's first line says what its comparison rests on
        print("scaling_model: warning: compared across a difference (--allow-differ): " + "; ".join(allowed))

    def bus(n, link=None, hosts=1):
        measured = [b for b in bws if b[0] <= n] or bws[:1]
        _, rs, ag, _ = measured[-1]
        if hosts > 1 and link is not None:
            net = LINK_EFFICIENCY * link / 8
            rs, ag = min(rs, net), min(ag, net)
        return rs, ag

    forward = compute1 / 8 / 3  # the first micro-step's forward, which a gated all-gather runs beside

    def predict(n, grad_bytes=4, link=None, hosts=1, gated=True):
        if n == 1:
            return step1, 0.0
        rs, ag = bus(n, link, hosts)
        f = (n - 1) / n
        gather = f * P * 2 / 1e9 / ag * 1e3
        exchange = f * P * grad_bytes / 1e9 / rs * 1e3 + (max(0.0, gather - forward) if gated else gather)
        return compute1 / n + opt1 / n + exchange, exchange

    print(f"one GPU ({os.path.basename(a.one)}): step {step1:.1f} ms, optimiser {opt1:.1f} ms, {P / 1e6:.0f}M parameters")
    for n, rs, ag, _ in bws:
        print(f"bus bandwidth on {n} GPUs: reduce-scatter {rs:.0f} GB/s, all-gather {ag:.0f} GB/s")
    beyond = []  # the relative errors outside the tolerance
    if a.check:
        print(f"\n{'run':<28} {'GPUs':>4} {'measured ms':>12} {'predicted ms':>13} {'error':>7} {'scaling':>8}")
    for path, c, s in checks:
        n = c["world_size"]
        got = s["median_step_ms"]
        want, _ = predict(n, gated=c["gather_wait"] == "layer" and c["gather_engine"] == "copy-engines")
        err = (want - got) / got
        if not within(err, a.tolerance):  # (a NaN error is beyond any tolerance)
            beyond.append(abs(err))
        print(f"{os.path.basename(path):<28} {n:>4} {got:>12.1f} {want:>13.1f} {100 * err:>6.1f}% {step1 / got:>7.2f}x")
    print("\nforecast (default exchange; with --grad-exchange bf16; --grad-sync embeddings and overlap at best):")
    print(f"{'machine':<32} {'step ms':>8} {'scaling':>8} {'bf16 ms':>8} {'embeddings ms':>14} {'overlap ms':>11}")
    early = early_share(config)
    G = a.gpus_per_host
    cases = [(f"{G} GPUs of one host", G, None, 1)] + [(f"2 x {G} GPUs, {x:g} Gb/s links", 2 * G, x, 2) for x in links]
    for name, n, link, hosts in cases:
        t, ex = predict(n, 4, link, hosts)
        t16, _ = predict(n, 2, link, hosts)
        window = compute1 / 8 * 2 / 3  # the last micro-step's backward
        overlap = t - min(ex, window) + 0.1 * ex
        embeddings = t - min(early * ex, window) + 0.1 * early * ex
        print(f"{name:<32} {t:>8.1f} {step1 / t:>7.2f}x {t16:>8.1f} {embeddings:>14.1f} {overlap:>11.1f}")
    if beyond:
        print(f"\nscaling_model: a prediction is off by {100 * max(beyond):.1f}%, more than --tolerance {100 * a.tolerance:.0f}%")
        return 1
    return 0


if __name__ == "__main__":
    run(main, "scaling_model")
