"""Per-call cost of each dispatcher route, and fp32 mm throughput beside torchplug-cpu's fp16 mm kernel.

    python benchmarks/dispatch.py [--json PATH]

Per-call costs use 16-element tensors, so they measure dispatch, not arithmetic; each route is
compared with the native (or, for the fallback, emulated) call of the same op and dtype; the
Python-kernel route's result check is also timed alone (the kernel called bare and checked). The mm
comparison times fp32 mm in fresh processes without and with the CPU plugin (whose float16 mm
kernel puts the dtype split in front of torch's fp32 kernel), alternating.
Verdict: fp32 mm GFLOP/s without the plugin / with it <= 1.03 (exit status 1 if not).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from common import Measurement, Report, parser

REPS, ROUNDS = 20000, 5
MM_TARGET = 1.03
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
import json, os, sys, warnings, torch
sys.path.insert(0, os.environ["BENCH_DIR"])
from dispatch import per_call_us
from torchplug import dispatcher
warnings.simplefilter("ignore")
x = torch.randn(16, device="xpu")
emulated = per_call_us(lambda: torch.neg(x))
dispatcher.enable_fallback("xpu", ops=["aten::neg"])
dispatcher.set_fallback_policy("xpu", "allow")
print(json.dumps([per_call_us(lambda: torch.neg(x)), emulated]))
"""


def per_call_us(fn) -> list[float]:
    """Microseconds per call of `fn`, one sample per block of REPS calls."""
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(REPS):
            fn()
        samples.append((time.perf_counter() - start) / REPS * 1e6)
    return samples


def mm_gflops(report: Report) -> tuple[Measurement, Measurement]:
    """fp32 mm GFLOP/s in fresh processes without the CPU plugin (TORCHPLUG_DISABLE=cpu) and with
    it (its float16 mm kernel registered, so fp32 passes the dtype split), alternating."""
    samples: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for plugin in samples:
            env = {**os.environ, **({} if plugin else {"TORCHPLUG_DISABLE": "cpu"})}
            out = subprocess.run([sys.executable, "-c", MM_CHILD], env=env, check=True, capture_output=True, text=True)
            samples[plugin] += (2 * 1024**3 / float(t) / 1e9 for t in out.stdout.split())
    return (report.add("fp32 mm 1024, plugin absent", samples[False], "GFLOP/s"),
            report.add("fp32 mm 1024, plugin registered", samples[True], "GFLOP/s"))


def main() -> int:
    args = parser(__doc__).parse_args()
    report = Report("dispatch", args)
    from torchplug import dispatcher
    from torchplug.dispatcher.result_check import checked

    def timed(name: str, fn) -> Measurement:
        return report.add(name, per_call_us(fn), "us/call")

    x32, x64, x16 = (torch.randn(16, dtype=d) for d in (torch.float32, torch.float64, torch.float16))
    native32 = timed("native (fp32 add)", lambda: torch.add(x32, x32))
    native64 = timed("native (fp64 add)", lambda: torch.add(x64, x64))
    native16 = timed("native (fp16 add)", lambda: torch.add(x16, x16))
    rows = [(native32, None)]
    # Routes installed through the dispatcher: fp64 adds go to a C++ kernel (aten::sub's, same
    # schema), fp16 adds to a Python kernel. Each is compared with the same dtype's native add.
    dispatcher.register("aten::add.Tensor", "cpu", torch.ops.aten.sub.Tensor, dtypes=[torch.float64])
    dispatcher.register("aten::add.Tensor", "cpu", lambda self, other, alpha=1: torch.sub(self, other),
                        dtypes=[torch.float16])
    rows.append((timed("C++ backend kernel (fp64 add)", lambda: torch.add(x64, x64)), native64))
    rows.append((timed("Python backend kernel (fp16 add)", lambda: torch.add(x16, x16)), native16))
    # What the result check (dispatcher/result_check.py) adds to that route: the same Python kernel
    # called directly, wrapped in its check and bare.
    bare = lambda self, other, alpha=1: torch.sub(self, other)  # noqa: E731
    checked_kernel = checked(bare, "aten::add.Tensor", torch._C._get_schema("aten::add", "Tensor"), "cpu", "cpu")
    bare_call = timed("Python kernel alone, unchecked", lambda: bare(x16, x16))
    check_call = timed("Python kernel alone, result-checked", lambda: checked_kernel(x16, x16))
    rows.append((check_call, bare_call))
    rows.append((timed("native beside a split (fp32 add)", lambda: torch.add(x32, x32)), native32))
    with dispatcher.trace():
        rows.append((timed("trace active (fp32 add)", lambda: torch.add(x32, x32)), native32))
    # The governed fallback copies to the CPU and back: measured on an emulated xpu, against the
    # same op run by the emulated runtime in place.
    env = {**os.environ, "TORCHPLUG_EMULATE": "xpu", "BENCH_DIR": str(Path(__file__).parent)}
    child = subprocess.run([sys.executable, "-c", FALLBACK_CHILD], env=env, check=True, capture_output=True, text=True)
    fallback, emulated = json.loads(child.stdout.strip().splitlines()[-1])
    emulated = report.add("emulated runtime (xpu neg)", emulated, "us/call")
    rows.append((report.add("governed CPU fallback (xpu neg)", fallback, "us/call"), emulated))
    print(f"per-call cost, 16-element tensors, median of 7 x {REPS} calls\n")
    report.table(("route", "us/call", "reference us/call", "ratio"),
                 [(m.name, m.cell, ref.cell if ref else "-", report.record(m.ratio(ref)).cell if ref else "-")
                  for m, ref in rows])
    print(f"\nthe result check adds {check_call.median - bare_call.median:.2f} us per Python-kernel call")
    without, with_kernel = mm_gflops(report)
    ratio = report.record(without.ratio(with_kernel, "fp32 mm GFLOP/s absent / registered"))
    print(f"\nfp32 torch.mm 1024x1024, {ROUNDS} fresh processes each, alternating\n")
    report.table(("torchplug-cpu's fp16 mm kernel", "GFLOP/s"),
                 [("absent (TORCHPLUG_DISABLE=cpu)", without.cell), ("registered", with_kernel.cell)])
    print()
    report.verdict(ratio.median <= MM_TARGET, f"fp32 mm GFLOP/s without the plugin / with it = {ratio.cell} "
                   f"(target <= {MM_TARGET})", ratio)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
