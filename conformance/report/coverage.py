"""The coverage audit as text: the COVERAGE line of every run, and the listing `--coverage` prints."""

from collections import defaultdict
from typing import Any


def coverage_line(report: dict[str, Any]) -> str:
    """report.json's "coverage" in one line (absent from older reports and runs without workers)."""
    cov = report.get("coverage")
    if not cov or not cov["relevant"]:
        return ""
    return (f"COVERAGE  {cov['percent']:.1f}% of {cov['relevant']} backend-relevant ATen overloads exercised "
            f"({cov['exercised']}); {cov['percent_in_reach']:.1f}% of the {cov['in_reach']} in reach "
            f"(torchplug check --coverage lists the rest)")


def coverage_listing(report: dict[str, Any]) -> str:
    """Every unexercised overload, grouped by why, the largest group first."""
    cov = report.get("coverage")
    if not cov:
        return "no coverage recorded (the run dispatched nothing to the device)"
    by_reason: dict[str, list[str]] = defaultdict(list)
    for overload, why in cov["unexercised"].items():
        by_reason[why].append(overload)
    lines = [coverage_line(report)]
    for why, overloads in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        lines += ["", f"{len(overloads)} {why}:"]
        lines += [f"  {name}" for name in sorted(overloads)]
    return "\n".join(lines)
