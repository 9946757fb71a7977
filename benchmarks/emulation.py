"""Emulated device vs CPU on the same ops, in one run: medians, a table and the ratios.

    python benchmarks/emulation.py [--device xpu] [--rounds 7] [--json results.json]

Each case is timed in alternating CPU / device rounds (so drift in machine load hits both
sides alike) and every round's time per call is recorded; the table shows the medians. Targets
(issue 3): add on 1M float32 <= 1.15x CPU, 1024x1024 matmul <= 1.10x, a 16-element add <= 2x.
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

DEVICE = "xpu"
for i, arg in enumerate(sys.argv):  # the device must be emulated before torch is imported
    if arg == "--device" and i + 1 < len(sys.argv):
        DEVICE = sys.argv[i + 1]
os.environ.setdefault("TORCHPLUG_EMULATE", "mps" if DEVICE == "mps" else DEVICE)

import torch  # noqa: E402

CASES = [  # name, shape, calls per round, target ratio
    ("add 1M float32", (1 << 20,), 200, 1.15),
    ("matmul 1024x1024 float32", (1024, 1024), 6, 1.10),
    ("add 16 float32 (per-op latency)", (16,), 20000, 2.00),
]


def _op(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    return torch.matmul if name.startswith("matmul") else torch.add


def _round(fn: Callable, a: torch.Tensor, b: torch.Tensor, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(a, b)
    return (time.perf_counter() - start) / calls


def measure(device: str, rounds: int) -> list[dict]:
    results = []
    for name, shape, calls, target in CASES:
        fn = _op(name)
        cpu_a, cpu_b = torch.randn(shape), torch.randn(shape)
        dev_a, dev_b = cpu_a.to(device), cpu_b.to(device)
        if not torch.equal(fn(dev_a, dev_b).cpu(), fn(cpu_a, cpu_b)):
            raise AssertionError(f"{name}: the emulated {device} result differs from the CPU's")
        for side in ((cpu_a, cpu_b), (dev_a, dev_b)):  # warm-up: caches, allocator, thread pool
            _round(fn, *side, max(1, calls // 10))
        cpu_times, dev_times = [], []
        for _ in range(rounds):
            cpu_times.append(_round(fn, cpu_a, cpu_b, calls))
            dev_times.append(_round(fn, dev_a, dev_b, calls))
        cpu_us, dev_us = statistics.median(cpu_times) * 1e6, statistics.median(dev_times) * 1e6
        results.append({
            "case": name, "cpu_us": cpu_us, "device_us": dev_us, "ratio": dev_us / cpu_us, "target": target,
            "calls_per_round": calls, "rounds": rounds,
        })
    return results


def table(results: list[dict], device: str) -> str:
    rows = [f"| case | cpu (us) | emulated {device} (us) | ratio | target | holds |", "|---|---:|---:|---:|---:|---|"]
    for r in results:
        holds = "yes" if r["ratio"] <= r["target"] else "NO"
        rows.append(
            f"| {r['case']} | {r['cpu_us']:.2f} | {r['device_us']:.2f} | {r['ratio']:.3f}x | "
            f"<= {r['target']:.2f}x | {holds} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE, help="emulated device type (default: xpu)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per case (default: 7)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    torch.empty(1, device=args.device)  # builds or loads the runtime before timing
    results = measure(args.device, args.rounds)
    device = torch.empty(0, device=args.device).device
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}")
    print(table(results, args.device))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0 if all(r["ratio"] <= r["target"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
