"""`torchplug check --compare a.json b.json`: what changed between two runs."""

from typing import Any

from ...table import format_table
from ..verdicts.status import CRASHES, FAILING, PASSING
from .console import mode_rows

GOOD, BAD = PASSING, FAILING


def _key(case: dict[str, Any]) -> tuple[str, str, str, int]:
    return case["op"], case["dtype"], case["mode"], case["sample"]


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """regressions (was good, now bad), fixes (was bad, now good), new crashes, and cases only in one run."""
    old = {_key(c): c for c in before["cases"]}
    new = {_key(c): c for c in after["cases"]}
    changes: dict[str, list[dict[str, Any]]] = {"regressions": [], "new_crashes": [], "fixes": [],
                                                "only_before": [], "only_after": []}
    for key, case in new.items():
        previous = old.get(key)
        if previous is None:
            changes["only_after"].append(case)
            continue
        was, now = previous["status"], case["status"]
        entry = {**case, "before": was}
        if now in CRASHES and was not in CRASHES:
            changes["new_crashes"].append(entry)
        elif now in BAD and was not in BAD:
            changes["regressions"].append(entry)
        elif now in GOOD and was in BAD:
            changes["fixes"].append(entry)
    changes["only_before"] = [c for key, c in old.items() if key not in new]
    return changes


def render(before: dict[str, Any], after: dict[str, Any], changes: dict[str, list[dict[str, Any]]]) -> str:
    lines = [f"before: {before['backend']['name']} {before['created']} ({before['selection']['tier']} tier)",
             f"after:  {after['backend']['name']} {after['created']} ({after['selection']['tier']} tier)", ""]
    if before["backend"]["name"] != after["backend"]["name"]:
        lines[2:2] = [f"warning: the reports are for different backends ({before['backend']['name']} and "
                      f"{after['backend']['name']}): a change between them is not a regression or a fix", ""]
    rates_before = {row[0]: row[1] for row in mode_rows(before)}
    lines.append(format_table(("MODE", "BEFORE", "AFTER"),
                              [(row[0], rates_before.get(row[0], "-"), row[1]) for row in mode_rows(after)]))
    for title, name in (("REGRESSIONS", "regressions"), ("NEW CRASHES", "new_crashes"), ("FIXES", "fixes")):
        cases = changes[name]
        lines += ["", f"{title}: {len(cases)}"]
        for case in cases[:40]:
            lines.append(f"  {case['op']} {case['dtype']} {case['mode']} #{case['sample']}: {case['before']} -> "
                         f"{case['status']}  {case['detail'][:120]}")
            if name != "fixes":
                lines.append(f"      repro: {case['repro']}")
        if len(cases) > 40:
            lines.append(f"  ... {len(cases) - 40} more")
    lines += ["", f"cases only in the first run: {len(changes['only_before'])}, "
                  f"only in the second: {len(changes['only_after'])}"]
    return "\n".join(lines)
