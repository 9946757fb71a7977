"""Median wall time of `python -c "import torch"` with the torchplug plugins autoloading vs. switched off.

    python benchmarks/autoload.py [--runs 21]

Both variants run interleaved in one session, so machine load affects them alike. On a shared
2-core machine whole-process times still scatter by about 5%, more than autoload costs, so the
script also times the autoload phase itself (torch's entry-point scan, importing torchplug and the
plugins, discovery) inside each process, as a share of that process's `import torch`.
"""

import argparse
import subprocess
import sys
import time

from common import clean_env, median_ms, print_table

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    on, off = env_with(True), env_with(False)
    plugins = subprocess.run([sys.executable, "-c", CHECK], env=on, check=True, cwd="/",
                             capture_output=True, text=True).stdout.strip()
    if not plugins:
        sys.exit("no torchplug plugin autoloads: pip install ./ ./devices/* first")
    time_import(on), time_import(off)  # warm the page cache
    samples = {"autoload on": [], "autoload off": []}
    for _ in range(args.runs):
        samples["autoload on"].append(time_import(on))
        samples["autoload off"].append(time_import(off))
    phases = [subprocess.run([sys.executable, "-c", PHASE], env=off, check=True, cwd="/", capture_output=True,
                             text=True).stdout.split() for _ in range(args.runs)]
    import_ms, phase_ms = median_ms([float(p[0]) for p in phases]), median_ms([float(p[1]) for p in phases])
    with_plugins, without = median_ms(samples["autoload on"]), median_ms(samples["autoload off"])
    print(f"plugins autoloaded: {plugins}; {args.runs} interleaved runs each\n")
    print_table(("python -c 'import torch'", "median ms"),
                [("plugins, TORCH_DEVICE_BACKEND_AUTOLOAD=1", f"{with_plugins:.0f}"),
                 ("TORCH_DEVICE_BACKEND_AUTOLOAD=0", f"{without:.0f}")])
    print(f"\nratio autoload/no-autoload: {with_plugins / without:.3f} (target <= 1.04)")
    print(f"autoload phase timed in-process: {phase_ms:.1f} ms = {phase_ms / import_ms:.1%} of import torch "
          f"({import_ms:.0f} ms); as a ratio {1 + phase_ms / import_ms:.3f}")


if __name__ == "__main__":
    main()
