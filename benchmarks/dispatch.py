"""Per-call cost of each dispatcher route, and fp32 mm throughput beside torchplug-cpu's fp16 mm kernel.

    python benchmarks/dispatch.py

Per-call costs use 16-element tensors, so they measure dispatch, not arithmetic; each route is
compared with the native (or, for the fallback, emulated) call of the same op and dtype. The mm
comparison times fp32 mm in fresh processes without and with the CPU plugin (whose float16 mm
kernel puts the dtype split in front of torch's fp32 kernel), alternating.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from common import median_ms, print_table

REPS, ROUNDS = 20000, 5
MM_CHILD = """
import time, torch
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
for _ in range(3):
    a @ b
times = []
for _ in range(15):
    start = time.perf_counter(); a @ b; times.append(time.perf_counter() - start)
print(*times)
"""
FALLBACK_CHILD = """
import os, sys, warnings, torch
sys.path.insert(0, os.environ["BENCH_DIR"])
from dispatch import per_call_us
from torchplug import dispatcher
warnings.simplefilter("ignore")
x = torch.randn(16, device="xpu")
emulated = per_call_us(lambda: torch.neg(x))
dispatcher.enable_fallback("xpu", ops=["aten::neg"])
dispatcher.set_fallback_policy("xpu", "allow")
print(per_call_us(lambda: torch.neg(x)), emulated)
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
    """fp32 mm GFLOP/s in fresh processes without the CPU plugin (TORCHPLUG_DISABLE=cpu) and with
    it (its float16 mm kernel registered, so fp32 passes the dtype split), alternating."""
    samples: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for plugin in samples:
            env = {**os.environ, **({} if plugin else {"TORCHPLUG_DISABLE": "cpu"})}
            out = subprocess.run([sys.executable, "-c", MM_CHILD], env=env, check=True, capture_output=True, text=True)
            samples[plugin] += map(float, out.stdout.split())
    flops = 2 * 1024**3
    return tuple(flops / (median_ms(samples[plugin]) / 1e3) / 1e9 for plugin in (False, True))


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
    # The governed fallback copies to the CPU and back: measured on an emulated xpu, against the
    # same op run by the emulated runtime in place.
    env = {**os.environ, "TORCHPLUG_EMULATE": "xpu", "BENCH_DIR": str(Path(__file__).parent)}
    child = subprocess.run([sys.executable, "-c", FALLBACK_CHILD], env=env, check=True, capture_output=True, text=True)
    fallback, emulated = map(float, child.stdout.split())
    rows.append(("governed CPU fallback (xpu neg)", fallback, emulated))
    print(f"per-call cost, 16-element tensors, median of 7 x {REPS} calls\n")
    print_table(("route", "us/call", "reference us/call", "ratio"),
                [(name, f"{t:.2f}", f"{ref:.2f}" if ref else "-", f"{t / ref:.2f}" if ref else "-")
                 for name, t, *maybe in rows for ref in [maybe[0] if maybe else None]])
    without, with_kernel = mm_gflops()
    print(f"\nfp32 torch.mm 1024x1024, {ROUNDS} fresh processes each, alternating\n")
    print_table(("torchplug-cpu's fp16 mm kernel", "GFLOP/s"),
                [("absent (TORCHPLUG_DISABLE=cpu)", f"{without:.1f}"), ("registered", f"{with_kernel:.1f}")])
    print(f"\nratio absent/installed: {without / with_kernel:.3f} (target <= 1.03)")


if __name__ == "__main__":
    main()
