"""Emulated device vs CPU on the same ops, in one run: medians, a table and the ratios.

    python benchmarks/emulation.py [--device xpu] [--rounds 7] [--json PATH]

Each case is timed in alternating CPU / device rounds (so drift in machine load hits both
sides alike) and every round's time per call is recorded; the table shows the medians.
Verdicts (exit status 1 if one fails): add on 1M float32 <= 1.15x CPU, 1024x1024 matmul <= 1.10x,
a 16-element add <= 2x. An emulated result that differs from the CPU's is an error.
"""

import os
import sys
import time
from collections.abc import Callable

DEVICE = "xpu"
for i, arg in enumerate(sys.argv):  # the device must be emulated before torch is imported
    if arg == "--device" and i + 1 < len(sys.argv):
        DEVICE = sys.argv[i + 1]
os.environ.setdefault("TORCHPLUG_EMULATE", "mps" if DEVICE == "mps" else DEVICE)

import torch  # noqa: E402

from common import Measurement, Report, parser  # noqa: E402

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


def measure(report: Report, device: str, rounds: int) -> list[tuple[str, Measurement, Measurement, float]]:
    """[(case, cpu us, device us, target ratio)], every round's time per call kept."""
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
            cpu_times.append(_round(fn, cpu_a, cpu_b, calls) * 1e6)
            dev_times.append(_round(fn, dev_a, dev_b, calls) * 1e6)
        results.append((name, report.add(f"{name}, cpu", cpu_times, "us"),
                        report.add(f"{name}, emulated {device}", dev_times, "us"), target))
    return results


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--device", default=DEVICE, help="emulated device type (default: xpu)")
    cli.add_argument("--rounds", type=int, default=7, help="alternating CPU / device rounds per case (default: 7)")
    args = cli.parse_args()
    report = Report("emulation", args)
    torch.empty(1, device=args.device)  # builds or loads the runtime before timing
    results = measure(report, args.device, args.rounds)
    device = torch.empty(0, device=args.device).device
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}, "
          f"medians of {args.rounds} rounds\n")
    ratios = [(name, cpu, dev, report.record(dev.ratio(cpu, f"{name}, emulated / cpu")), target)
              for name, cpu, dev, target in results]
    report.table(("case", "cpu (us)", f"emulated {args.device} (us)", "ratio", "target"),
                 [(name, cpu.cell, dev.cell, ratio.cell, f"<= {target:.2f}") for name, cpu, dev, ratio, target in ratios])
    print()
    for name, _, _, ratio, target in ratios:
        report.verdict(ratio.median <= target, f"{name}: emulated / cpu = {ratio.cell} (target <= {target:.2f})", ratio)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
