#!/usr/bin/env python3
"""NCCL's reduce-scatter and all-gather between the GPUs of one host (or of a host file), at the
sizes train_gpt's optimiser exchanges at the speedrun's size: its fp32 gradients and its bf16
weights. Prints each collective's time and bandwidth, and writes them as JSON for
scripts/scaling_model.py.

    torchrun --standalone --nproc_per_node N bench/collective_bandwidth.py [--json OUT.json] [--mb 1500]

Bandwidths as nccl-tests reports them: algorithm bandwidth = the whole buffer's bytes / time, bus
bandwidth = algorithm bandwidth x (N - 1) / N (what each rank's links move, comparable across N).
The time is the median of --iters calls after 3 warm-up calls, each timed with CUDA events on
fresh random data.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tool_errors import ToolError, run  # noqa: E402


def main():
    p = argparse.ArgumentParser(prog="collective_bandwidth", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here (a new file)")
    p.add_argument("--mb", type=float, default=1576.0, help="the fp32 gradients' size in MB (the speedrun's: 1576)")
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    if not (1 <= a.mb <= 65536):
        p.error("--mb must be between 1 and 65536")
    if not (1 <= a.iters <= 1000):
        p.error("--iters must be between 1 and 1000")
    if a.json and os.path.exists(a.json):
        raise ToolError(f"{a.json} exists: name a new file (--json)")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise ToolError("needs PyTorch (a python3 with torch, as on the GPU machine)")
    if "LOCAL_RANK" not in os.environ:
        raise ToolError("start it with torchrun --standalone --nproc_per_node N (one process a GPU)")
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    results = []
    try:
        for name, dtype, scale in (("reduce-scatter fp32", torch.float32, 1.0), ("all-gather bf16", torch.bfloat16, 0.5)):
            n = int(a.mb * 1e6 * scale / torch.tensor([], dtype=dtype).element_size()) // world * world
            full = torch.randn(n, dtype=torch.float32, device="cuda").to(dtype)
            part = torch.empty(n // world, dtype=dtype, device="cuda")
            times = []
            for i in range(3 + a.iters):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                dist.barrier()
                start.record()
                if name.startswith("reduce"):
                    dist.reduce_scatter_tensor(part, full)
                else:
                    dist.all_gather_into_tensor(full, part)
                end.record()
                torch.cuda.synchronize()
                if i >= 3:
                    times.append(start.elapsed_time(end))
            ms = statistics.median(times)
            size = n * full.element_size()
            alg = size / (ms / 1e3) / 1e9
            results.append({"op": name, "bytes": size, "ms": ms, "algbw_GBs": alg, "busbw_GBs": alg * (world - 1) / world})
        if rank == 0:
            print(f"{'collective':<20} {'MB':>8} {'ms':>8} {'algbw GB/s':>11} {'busbw GB/s':>11}   ({world} ranks)")
            for r in results:
                print(f"{r['op']:<20} {r['bytes'] / 1e6:>8.0f} {r['ms']:>8.2f} {r['algbw_GBs']:>11.1f} {r['busbw_GBs']:>11.1f}")
            if a.json:
                with open(a.json, "x") as f:
                    json.dump({"ranks": world, "device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    run(main, "collective_bandwidth")
