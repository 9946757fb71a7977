"""What every benchmark script shares: its command line, its measurements, its tables, verdicts and JSON.

    report = Report("fp16_gemm", args)            # args from parser(__doc__).parse_args()
    m = report.add("mm 1024 fp16", samples, "GFLOP/s")
    report.table(["case", "GFLOP/s"], [["mm 1024", m.cell]])
    report.verdict(m.median >= 400, "mm 1024 fp16 >= 400 GFLOP/s", m)
    sys.exit(report.finish())                     # 1 if a verdict failed; writes --json PATH

A measurement keeps every repeat, so the table can show the median and the reader can see how far
the repeats scatter: a figure whose max/min exceeds NOISY_SPREAD is marked `~` (noisy), and a
verdict resting on one says so. The JSON holds the machine, the ISA path of torchplug's CPU
kernels, the torch version, the load average before and after, and each figure's median, min,
max and repeats, so runs on different machines or days can be compared.
"""

import argparse
import json
import math
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

NOISY_SPREAD = 1.3  # max/min over repeats above which a figure is not trusted
NOISY_MARK = "~"
JSON_HELP = ("also write the figures to PATH as JSON: machine, ISA path, torch version, load average before and "
             "after, and every figure's median, min, max and number of repeats")


def clean_env(**overrides: str) -> dict[str, str]:
    """This environment without the caller's TORCHPLUG_* settings, plus `overrides`: what a
    measured child process runs with, so only the benchmark decides torchplug's configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    return {**env, **overrides}


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser whose --help prints the script's whole docstring, with --json PATH added."""
    result = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--json", metavar="PATH", help=JSON_HELP)
    return result


def _format(value: float) -> str:
    """About four significant digits, never scientific notation: 873.4, 1.034, 0.0120, 12345."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = min(4, max(0, 3 - math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


@dataclass(frozen=True)
class Measurement:
    """One figure: the median of its repeats, their range, and whether that range is too wide to trust."""

    name: str
    unit: str
    median: float
    min: float
    max: float
    repeats: int
    noisy: bool

    @classmethod
    def of(cls, name: str, samples: Sequence[float], unit: str) -> "Measurement":
        if not samples:
            raise ValueError(f"measurement {name!r} has no samples")
        low, high = min(samples), max(samples)
        spread = high / low if low > 0 else math.inf if high > low else 1.0
        return cls(name, unit, statistics.median(samples), low, high, len(samples), spread > NOISY_SPREAD)

    @property
    def cell(self) -> str:
        """The median for a table, marked when the repeats scatter too far."""
        return _format(self.median) + (NOISY_MARK if self.noisy else "")

    def ratio(self, other: "Measurement", name: str | None = None) -> "Measurement":
        """self / other, by medians; its range is the worst case of both ranges, noisy if either is."""
        return Measurement(name or f"{self.name} / {other.name}", "x", self.median / other.median,
                           self.min / other.max, self.max / other.min, min(self.repeats, other.repeats),
                           self.noisy or other.noisy)


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for i, row in enumerate(cells):
        print(" | ".join(cell.rjust(width) for cell, width in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * width for width in widths))


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def isa_path() -> dict[str, object]:
    """The ISA path torchplug's CPU kernels run in this process, without ever compiling them."""
    try:
        from torchplug_cpu import kernels
    except ImportError:
        return {"current": None, "why": "torchplug-cpu is not installed"}
    ext = kernels.extension(build=False)
    if ext is None:
        return {"current": None, "why": "the CPU kernels are not built (torchplug build cpu)"}
    return {"current": ext.current_isa(), "supported": list(ext.supported_isas()), "registered": kernels.loaded()}


class Report:
    """Collects one run's measurements and verdicts; `finish()` prints the summary and writes the JSON."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.args = args
        self.load_before = os.getloadavg()
        self.measurements: list[Measurement] = []
        self.verdicts: list[dict[str, object]] = []
        self._noisy_shown = False

    def add(self, name: str, samples: Sequence[float], unit: str) -> Measurement:
        return self.record(Measurement.of(name, samples, unit))

    def record(self, measurement: Measurement) -> Measurement:
        """Keep a figure made elsewhere (a ratio, a child process's measurement) in the JSON."""
        self.measurements.append(measurement)
        return measurement

    def table(self, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        print_table(header, rows)
        if not self._noisy_shown and any(str(c).endswith(NOISY_MARK) for row in rows for c in row):
            self._noisy_shown = True
            print(f"{NOISY_MARK} noisy: the repeats' max/min exceeds {NOISY_SPREAD}; rerun on a quieter machine")

    def verdict(self, ok: bool, text: str, *evidence: Measurement) -> bool:
        """Print and keep PASS/FAIL `text`; a verdict resting on a noisy figure says so."""
        noisy = any(m.noisy for m in evidence)
        line = f"{'PASS' if ok else 'FAIL'}: {text}" + (" (noisy: rerun on a quieter machine)" if noisy else "")
        print(line)
        self.verdicts.append({"ok": bool(ok), "text": text, "noisy": noisy})
        return ok

    def summary(self) -> dict[str, object]:
        import torch

        return {
            "benchmark": self.name,
            "arguments": {k: v for k, v in vars(self.args).items() if k != "json"},
            "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "platform": platform.platform(),
                        "python": platform.python_version(), "torch_threads": torch.get_num_threads()},
            "torch": torch.__version__,
            "isa": isa_path(),
            "load_average": {"before": list(self.load_before), "after": list(os.getloadavg())},
            "noisy_spread": NOISY_SPREAD,
            "measurements": [asdict(m) for m in self.measurements],
            "verdicts": self.verdicts,
            "passed": all(v["ok"] for v in self.verdicts),
        }

    def finish(self) -> int:
        """The exit status: 1 if any verdict failed. Writes --json PATH when it was given."""
        summary = self.summary()
        before, after = summary["load_average"]["before"][0], summary["load_average"]["after"][0]
        failed = sum(not v["ok"] for v in self.verdicts)
        print(f"\n{summary['machine']['cpu']}, {summary['machine']['cores']} cores, torch {summary['torch']}, "
              f"load average {before:.2f} before, {after:.2f} after"
              + (f"; {failed} of {len(self.verdicts)} verdicts FAILED" if failed else ""))
        if getattr(self.args, "json", None):
            with open(self.args.json, "w") as out:
                json.dump(summary, out, indent=2, default=str)  # paths among the arguments
                out.write("\n")
        return 1 if failed else 0

