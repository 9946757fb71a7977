"""What `torchplug check` prints: backend line, per-mode pass rates, runtime checks, failure groups."""

from typing import Any

from ...table import format_table
from ..verdicts.status import FAILING
from .coverage import coverage_line
from .groups import failure_groups
from .schema import interruption

SHOWN_GROUPS = 12


def mode_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for mode, entry in report["summary"].items():
        counts = entry["counts"]
        rate = "-" if entry["pass_rate"] is None else f"{entry['pass_rate'] * 100:.1f}%"
        rows.append((mode, rate, str(entry["judged"]),
                     ", ".join(f"{status} {n}" for status, n in sorted(counts.items(), key=lambda kv: -kv[1]))))
    for mode, reason in report["unsupported_modes"].items():
        rows.append((mode, "unsupported", "0", reason))
    return rows


def fallback_line(report: dict[str, Any]) -> str:
    """The share of each fallback verdict (report.json's "fallback"; absent from older reports)."""
    fallback = report.get("fallback")
    if not fallback or not fallback["total"]:
        return ""
    shares = ", ".join(f"{verdict} {share * 100:.1f}% ({fallback['counts'][verdict]})"
                       for verdict, share in fallback["shares"].items())
    return f"FALLBACK  {shares} of {fallback['total']} cases"


def render(report: dict[str, Any]) -> str:
    backend = report["backend"]
    lines = [f"torchplug check {backend['name']}: {backend['device']} ({backend['mode']}), "
             f"torch {report['versions']['torch']}, {report['selection']['tier']} tier, "
             f"{', '.join(report['selection']['dtypes'])}, {report['wall_s']:.1f} s", ""]
    if report.get("interrupted"):
        lines[-1:-1] = [f"INTERRUPTED {interruption(report)}"]
    lines.append(format_table(("MODE", "PASS RATE", "JUDGED", "STATUSES"), mode_rows(report)))
    if line := fallback_line(report):
        lines += ["", line]
    if line := coverage_line(report):
        lines.append(line)
    if report["runtime_checks"]:
        lines += ["", format_table(("RUNTIME CHECK", "RESULT", "DETAIL"),
                                   [(c["name"], c["status"], c["detail"][:100]) for c in report["runtime_checks"]])]
    failed_checks = [c for c in report["runtime_checks"] if c["status"] in FAILING]
    for check in failed_checks:  # in full: the table cuts details at 100 characters
        lines += ["", f"runtime check {check['name']} {check['status']}: {check['detail']}"]
    groups = failure_groups(report["cases"])
    if groups:
        lines += ["", f"{sum(len(g.cases) for g in groups)} problem cases in {len(groups)} groups "
                      f"(largest first; each with the repro of its first case):"]
        for group in groups[:SHOWN_GROUPS]:
            ops = ", ".join(group.ops[:6]) + (f" (+{len(group.ops) - 6} more)" if len(group.ops) > 6 else "")
            lines.append(f"  {group.status} [{group.mode}] x{len(group.cases)}: {group.cause}")
            lines.append(f"      ops: {ops}; dtypes: {', '.join(group.dtypes)}")
            lines.append(f"      repro: {group.cases[0]['repro']}")
        if len(groups) > SHOWN_GROUPS:
            lines.append(f"  ... {len(groups) - SHOWN_GROUPS} more groups in the report (--report DIR)")
    elif not failed_checks and not report.get("interrupted"):
        lines += ["", "no failures, crashes or timeouts"]
    return "\n".join(lines)
