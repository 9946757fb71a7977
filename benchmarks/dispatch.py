"""Per-call cost of each dispatcher route, and fp32 mm throughput with an fp16-only mm kernel installed.

    python benchmarks/dispatch.py

Per-call costs use a 16-element add, so they measure dispatch, not arithmetic. The mm comparison
runs interleaved rounds of fresh processes with and without the fp16-only kernel.
"""

import subprocess
import sys
import time

import torch

from common import median_ms, print_table

REPS, ROUNDS = 20000, 5
MM_CHILD = """
import sys, time, torch
if sys.argv[1] == "with":
    from torchplug import dispatcher
    dispatcher.register("aten::mm", "cpu", lambda self, mat2: (self.float() @ mat2.float()).half(),
                        dtypes=[torch.float16])
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
for _ in range(3):
    a @ b
for _ in range(15):
    start = time.perf_counter(); a @ b; print(time.perf_counter() - start)
"""


def per_call_us(fn) -> float:
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(REPS):
            fn()
        samples.append((time.perf_counter() - start) / REPS)
    return median_ms(samples) * 1e3


def mm_gflops() -> tuple[float, float]:
    samples = {"without": [], "with": []}
    for _ in range(ROUNDS):
        for variant in samples:
            out = subprocess.run([sys.executable, "-c", MM_CHILD, variant], check=True, capture_output=True, text=True)
            samples[variant] += [float(line) for line in out.stdout.split()]
    flops = 2 * 1024**3
    return tuple(flops / (median_ms(samples[v]) / 1e3) / 1e9 for v in ("without", "with"))


def main() -> None:
    from torchplug import dispatcher

    x32, x64, x16 = (torch.randn(16, dtype=d) for d in (torch.float32, torch.float64, torch.float16))
    rows = [("native (fp32 add)", per_call_us(lambda: torch.add(x32, x32)))]
    native64 = per_call_us(lambda: torch.add(x64, x64))
    native16 = per_call_us(lambda: torch.add(x16, x16))
    # Routes installed through the dispatcher: fp64 adds go to a C++ kernel (aten::sub's, same
    # schema), fp16 adds to a Python kernel. Each is compared with the same dtype's native add.
    dispatcher.register("aten::add.Tensor", "cpu", torch.ops.aten.sub.Tensor, dtypes=[torch.float64])
    dispatcher.register("aten::add.Tensor", "cpu", lambda self, other, alpha=1: torch.sub(self, other),
                        dtypes=[torch.float16])
    rows.append(("C++ backend kernel (fp64 add)", per_call_us(lambda: torch.add(x64, x64)), native64))
    rows.append(("Python backend kernel (fp16 add)", per_call_us(lambda: torch.add(x16, x16)), native16))
    rows.append(("native beside a split (fp32 add)", per_call_us(lambda: torch.add(x32, x32)), rows[0][1]))
    with dispatcher.trace():
        rows.append(("trace active (fp32 add)", per_call_us(lambda: torch.add(x32, x32)), rows[0][1]))
    print(f"per-call cost, 16-element tensors, median of 7 x {REPS} calls\n")
    print_table(("route", "us/call", "native us/call", "ratio"),
                [(name, f"{t:.2f}", f"{ref:.2f}" if ref else "-", f"{t / ref:.2f}" if ref else "-")
                 for name, t, *maybe in rows for ref in [maybe[0] if maybe else None]])
    without, with_kernel = mm_gflops()
    print(f"\nfp32 torch.mm 1024x1024, {ROUNDS} interleaved rounds of fresh processes\n")
    print_table(("fp16-only aten::mm kernel", "GFLOP/s"), [("absent", f"{without:.1f}"), ("installed", f"{with_kernel:.1f}")])
    print(f"\nratio absent/installed: {without / with_kernel:.3f} (target <= 1.03)")


if __name__ == "__main__":
    main()
