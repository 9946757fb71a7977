"""Median wall time of `python -c "import torch"` with the torchplug plugins autoloading vs. switched off.

    python benchmarks/autoload.py [--runs 21] [--json PATH]

Both variants run interleaved in one session, so machine load affects them alike. On a shared
2-core machine whole-process times still scatter by about 5%, more than autoload costs, so the
script also times the autoload phase itself (torch's entry-point scan, importing torchplug and the
plugins, discovery) inside each process, as a share of that process's `import torch`.
Verdict: 1 + phase / import torch <= 1.04 (exit status 1 if not).
"""

import subprocess
import sys
import time

from common import Measurement, Report, clean_env, parser

TARGET = 1.04

CHECK = "import torch, torchplug.entrypoints as ep; print(','.join(ep.loaded()))"
# With autoload off, import torch, then run torch's own autoload step and time both.
PHASE = """
import os, time
start = time.perf_counter(); import torch; imported = time.perf_counter()
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
torch._import_device_backends()
print(imported - start, time.perf_counter() - imported)
"""


def env_with(autoload: bool) -> dict[str, str]:
    return clean_env(TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")


def time_import(env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], env=env, check=True, cwd="/")
    return time.perf_counter() - start


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--runs", type=int, default=21, help="interleaved imports per variant, and in-process phase timings "
                     "(default: 21)")
    args = cli.parse_args()
    report = Report("autoload", args)
    on, off = env_with(True), env_with(False)
    plugins = subprocess.run([sys.executable, "-c", CHECK], env=on, check=True, cwd="/",
                             capture_output=True, text=True).stdout.strip()
    if not plugins:
        sys.exit("no torchplug plugin autoloads: pip install ./ ./devices/* first")
    time_import(on), time_import(off)  # warm the page cache
    samples: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.runs):
        for autoload in samples:
            samples[autoload].append(time_import(on if autoload else off) * 1e3)
    phases = [subprocess.run([sys.executable, "-c", PHASE], env=off, check=True, cwd="/", capture_output=True,
                             text=True).stdout.split() for _ in range(args.runs)]
    with_plugins = report.add("import torch, autoload on", samples[True], "ms")
    without = report.add("import torch, autoload off", samples[False], "ms")
    import_ms = report.add("import torch (in-process)", [float(p[0]) * 1e3 for p in phases], "ms")
    phase_ms = report.add("autoload phase (in-process)", [float(p[1]) * 1e3 for p in phases], "ms")
    whole = report.record(with_plugins.ratio(without, "autoload / no-autoload, whole process"))
    phase = report.record(Measurement("autoload cost as a ratio, in-process", "x",
                                      1 + phase_ms.median / import_ms.median, 1 + phase_ms.min / import_ms.max,
                                      1 + phase_ms.max / import_ms.min, args.runs, phase_ms.noisy or import_ms.noisy))
    print(f"plugins autoloaded: {plugins}; {args.runs} interleaved runs each\n")
    report.table(("python -c 'import torch'", "median ms", "min", "max"),
                 [(label, m.cell, f"{m.min:.0f}", f"{m.max:.0f}")
                  for label, m in (("plugins, TORCH_DEVICE_BACKEND_AUTOLOAD=1", with_plugins),
                                   ("TORCH_DEVICE_BACKEND_AUTOLOAD=0", without))])
    print(f"\nratio autoload/no-autoload, whole process: {whole.cell}")
    print(f"autoload phase timed in-process: {phase_ms.cell} ms = {phase_ms.median / import_ms.median:.1%} of "
          f"import torch ({import_ms.cell} ms)")
    # Whole-process times scatter more than autoload costs, so the verdict rests on the phase timed in-process.
    report.verdict(phase.median <= TARGET, f"import torch with autoload / without, in-process = {phase.cell} "
                   f"(target <= {TARGET})", phase)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
