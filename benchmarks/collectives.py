"""all_reduce bus bandwidth on 2 ranks: emulated xpu (torchplug's backend) against plain CPU gloo, in one run.

    python benchmarks/collectives.py [--rounds 9] [--json PATH]

Both ranks share one process group, "cpu:gloo,xpu:xccl": CPU tensors go to gloo directly, and xpu
tensors reach the same gloo through torchplug's host aliases, so the difference between the two
columns is exactly what emulation adds. Sizes 4 KiB to 64 MiB of float32; at each size the CPU and
xpu timings alternate round by round, so drift in machine load hits both alike. Bus bandwidth is
size / time x 2(n-1)/n (NCCL's definition; 1x for 2 ranks). Verdict (exit status 1 if it fails):
xpu >= 0.9x CPU gloo at every size from 1 MiB up, which means no extra copies. A second table
gives the fixed cost per call, free of the network: a 16-element all_reduce on a group of rank 0
alone, CPU against xpu.
"""

import os
import socket
import sys
import time

os.environ.setdefault("TORCHPLUG_EMULATE", "xpu")  # before torch is imported, in every rank

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from common import Report, parser  # noqa: E402

WORLD = 2
SIZES = [4 << 10 << (2 * i) for i in range(8)]  # 4 KiB, 16 KiB, ..., 64 MiB
TARGET, TARGET_FROM = 0.9, 1 << 20


def _label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def _round(t: torch.Tensor, calls: int, group: "dist.ProcessGroup | None" = None) -> float:
    """Seconds per all_reduce over `calls` back-to-back calls, the ranks started together."""
    dist.barrier(group)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / calls


def _rank(rank: int, port: int, rounds: int, results: "mp.Queue") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("cpu:gloo,xpu:xccl", rank=rank, world_size=WORLD)
    times: dict[tuple[str, int], list[float]] = {}
    for size in SIZES:
        n = size // 4
        cpu, xpu = torch.ones(n), torch.ones(n, device="xpu")
        calls = max(4, min(200, (64 << 20) // size))  # 64 MiB a round at least: one call alone is mostly noise
        for t in (cpu, xpu):  # warm-up: connections, buffers, first-call costs
            _round(t, 1)
        for _ in range(rounds):
            for t in (cpu, xpu):
                times.setdefault((t.device.type, size), []).append(_round(t, calls))
    alone = dist.new_group([0])  # every rank takes part in making it; rank 0 alone uses it
    if rank == 0:
        for t in (torch.ones(16), torch.ones(16, device="xpu")):
            _round(t, 100, alone)
            times["per call", t.device.type] = [_round(t, 2000, alone) for _ in range(rounds)]
        results.put(times)
    dist.destroy_process_group()


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--rounds", type=int, default=9)
    args = args_parser.parse_args()
    report = Report("collectives", args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(_rank, args=(port, args.rounds, results), nprocs=WORLD, start_method="spawn", join=False)
    times = results.get(timeout=1800)
    rows, ok = [], True
    for size in SIZES:
        bandwidth = {d: report.add(f"all_reduce {_label(size)} {d}", [size / s / 1e9 for s in times[(d, size)]],
                                   "GB/s") for d in ("cpu", "xpu")}
        ratio = report.record(bandwidth["xpu"].ratio(bandwidth["cpu"], f"all_reduce {_label(size)} xpu / cpu"))
        rows.append([_label(size), bandwidth["cpu"].cell, bandwidth["xpu"].cell, ratio.cell])
        if size >= TARGET_FROM:
            ok &= report.verdict(ratio.median >= TARGET, f"all_reduce {_label(size)}: xpu >= {TARGET}x CPU gloo", ratio)
    print(f"all_reduce bus bandwidth, {WORLD} ranks on 127.0.0.1, float32, median of {args.rounds} rounds")
    report.table(["size", "CPU gloo GB/s", "emulated xpu GB/s", "xpu / CPU"], rows)
    per_call = {d: report.add(f"all_reduce 16 elements {d}, one rank", [s * 1e6 for s in times["per call", d]], "us")
                for d in ("cpu", "xpu")}
    print(f"\nfixed cost per call: all_reduce of 16 float32 on a one-rank group, median of {args.rounds} x 2000 calls")
    added = per_call["xpu"].median - per_call["cpu"].median
    report.table(["cpu us/call", "emulated xpu us/call", "added us/call"],
                 [[per_call["cpu"].cell, per_call["xpu"].cell, f"{added:.2f}"]])
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
