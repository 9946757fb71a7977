"""report.md: per-mode pass rates, runtime checks, failure groups, then the op x dtype matrix."""

from collections import defaultdict
from typing import Any

from .console import mode_rows
from .groups import failure_groups
from .schema import interruption

# One letter per status in the matrix; a cell shows the worst status of its cases.
SYMBOLS = {"pass": "✓", "xfail": "x", "skip": "·", "unsupported": "–", "unsupported-dtype": "d",
           "xpass": "X", "fail": "F", "timeout": "T", "crashed": "C"}
SEVERITY = list(SYMBOLS)  # later is worse


def worst(statuses: list[str]) -> str:
    return max(statuses, key=SEVERITY.index)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]


def matrix(cases: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, dict[str, str]]]]:
    """dtypes, and op -> dtype -> mode -> worst status."""
    cells: dict[str, dict[str, dict[str, list[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    dtypes: list[str] = []
    for case in cases:
        cells[case["op"]][case["dtype"]][case["mode"]].append(case["status"])
        if case["dtype"] not in dtypes:
            dtypes.append(case["dtype"])
    return dtypes, {op: {d: {m: worst(s) for m, s in by_mode.items()} for d, by_mode in by_dtype.items()}
                    for op, by_dtype in sorted(cells.items())}


def _cell(by_mode: dict[str, str], modes: list[str]) -> str:
    return "".join(SYMBOLS.get(by_mode.get(mode, ""), " ") for mode in modes)


def render(report: dict[str, Any]) -> str:
    backend = report["backend"]
    lines = [f"# torchplug check {backend['name']}", "",
             f"{backend['device']} ({backend['mode']}), torch {report['versions']['torch']}, torchplug "
             f"{report['versions']['torchplug']}, {report['selection']['tier']} tier, {report['wall_s']:.1f} s, "
             f"{report['created']}. Reference: {backend['reference']}. {backend['codegen']}. ISA: {backend['isa']}.", ""]
    if report.get("interrupted"):
        lines += [f"**Interrupted** {interruption(report)}.", ""]
    lines += ["## Pass rate per mode", ""]
    lines += _table(("mode", "pass rate", "judged", "statuses"), mode_rows(report))
    if report["runtime_checks"]:
        lines += ["", "## Runtime checks", ""]
        lines += _table(("check", "result", "detail"), [(c["name"], c["status"], c["detail"])
                                                        for c in report["runtime_checks"]])
    groups = failure_groups(report["cases"])
    if groups:
        lines += ["", "## Failure groups", ""]
        lines += _table(("status", "mode", "cases", "cause", "ops", "repro"),
                        [(g.status, g.mode, str(len(g.cases)), g.cause, ", ".join(g.ops[:8]) +
                          (" ..." if len(g.ops) > 8 else ""), f"`{g.cases[0]['repro']}`") for g in groups])
    dtypes, cells = matrix(report["cases"])
    modes = list(report["summary"])
    lines += ["", "## Op × dtype matrix", "",
              "Each cell: one symbol per mode (" + ", ".join(modes) + "); " +
              ", ".join(f"{s} {name}" for name, s in SYMBOLS.items()) +
              "; a blank: the mode has no case for that op and dtype (not in the tier, or the op has no such variant).", ""]
    rows = [(op, *(_cell(by_dtype.get(d, {}), modes) for d in dtypes)) for op, by_dtype in cells.items()]
    lines += _table(("op", *dtypes), rows)
    return "\n".join(lines) + "\n"
