"""float32 F.linear on the CPU: torch's MKL, oneDNN called directly, and torchplug-cpu's route, in GFLOP/s.

    python benchmarks/fp32_gemm.py [--rounds N] [--json PATH]

torchplug-cpu routes float32 GEMMs to oneDNN where MKL is the slower one (TORCHPLUG_CPU_FP32=auto:
AMD CPUs with AVX-512). In this one process, each round times F.linear with torchplug's kernels
unregistered (torch's MKL), oneDNN's linear called directly (torch.ops.mkldnn._linear_pointwise),
and F.linear with torchplug's kernels registered (whatever its route chose; printed), in turn,
each round starting one engine later. A sample is the mean of as many calls in a row as fill about
25 ms, after an untimed one whenever the kernels were just (un)registered. Figures are medians
over rounds; a figure whose rounds scatter by more than 1.3x (max/min) is marked ~.
Verdict (exit status 1 if it fails): torchplug's F.linear >= 0.95x the faster of MKL and oneDNN at
1024x1024x1024 and 64x4096x4096.
"""

import sys
import time

import torch
import torch.nn.functional as F

from common import Report, parser

SHAPES = [(1024, 1024, 1024), (64, 4096, 4096), (1, 4096, 4096), (512, 4096, 11008)]
TARGET_SHAPES = [(1024, 1024, 1024), (64, 4096, 4096)]
TARGET = 0.95


SAMPLE_SECONDS = 0.025  # each sample repeats a call this long: one 5 ms call scattered 0.87-1.20x


def seconds(fn, calls: int = 1) -> float:
    """Seconds per call over `calls` calls in a row."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    args = cli.parse_args()
    report = Report("fp32_gemm", args)
    from torchplug_cpu import kernels

    kernels.load()
    print(f"torchplug ISA path {kernels.current_isa()}; {kernels.fp32_status()}; {torch.get_num_threads()} threads")
    rows = []
    for m, k, n in SHAPES:
        x, w = torch.randn(m, k), torch.randn(n, k)
        engines = {"MKL": (False, lambda: F.linear(x, w)),
                   "oneDNN": (False, lambda: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")),
                   "torchplug": (True, lambda: F.linear(x, w))}
        samples = {name: [] for name in engines}
        engines["oneDNN"][1]()  # a first call allocates; the second sizes the samples
        calls = max(1, round(SAMPLE_SECONDS / seconds(engines["oneDNN"][1])))
        names = list(engines)
        for round_ in range(args.rounds + 1):  # the first round warms up
            # Each round starts one engine later, so none always runs in another's wake.
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                registered, fn = engines[name]
                if registered != kernels.loaded():
                    kernels.load() if registered else kernels.unload()
                    # Untimed: the first calls after (un)registering pay the dispatcher's set-up, and
                    # the next two fault a fresh 4 MB output in (1024 page faults, +0.8 ms each).
                    seconds(fn, calls)
                took = seconds(fn, calls)
                if round_:
                    samples[name].append(2 * m * n * k / took / 1e9)
        kernels.load()
        label = f"linear {m}x{k} @ {k}x{n}"
        figures = {name: report.add(f"{label}, {name}", s, "GFLOP/s") for name, s in samples.items()}
        best = max(figures["MKL"], figures["oneDNN"], key=lambda f: f.median)
        ratio = report.record(figures["torchplug"].ratio(best, f"{label}: torchplug / best"))
        rows.append([label, *(f.cell for f in figures.values()), f"{ratio.cell}x"])
        if (m, k, n) in TARGET_SHAPES:
            report.verdict(ratio.median >= TARGET, f"{label}: torchplug {ratio.median:.2f}x the faster of MKL and "
                           f"oneDNN (target >= {TARGET}x)", ratio)
    report.table(["case", "MKL GFLOP/s", "oneDNN GFLOP/s", "torchplug GFLOP/s", "vs best"], rows)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
