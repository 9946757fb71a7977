"""The JSON report, schema v1: machine, versions, backend (native/emulated, ISA path), cases."""

import json
import os
import platform
from collections import Counter
from pathlib import Path
from typing import Any

from ..cases.case import Case
from ..verdicts.status import FAILING, NOT_JUDGED, PASSING

SCHEMA = 1


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "machine": platform.machine(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "hostname": platform.node()}


def repro_command(backend: str, case: Case) -> str:
    return f"torchplug check {backend} --op {case.op} --dtype {case.dtype} --mode {case.mode} --sample {case.sample}"


def repro_snippet(backend: str, device: str, case: Case) -> str:
    """A short standalone script that runs the case and raises on a mismatch."""
    return (
        "import torch\n"
        "from torchplug.conformance import modes, target\n"
        "from torchplug.conformance.cases import opinfo\n"
        f"entry = opinfo.find({case.op!r})\n"
        f"device, info = target.open_target({backend!r})  # {device}\n"
        f"sample = modes.case_input(entry, torch.{case.dtype}, {case.mode!r}, {case.sample}, device)\n"
        f"verdict = modes.mode({case.mode!r}).run(entry, sample, device)\n"
        "print(sample)\n"
        "assert verdict.ok, verdict.detail\n"
    )


def summary(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode: the count of each status and the pass rate over cases that ran and compared."""
    by_mode: dict[str, Counter] = {}
    for case in cases:
        by_mode.setdefault(case["mode"], Counter())[case["status"]] += 1
    result = {}
    from ..modes import mode_names

    order = mode_names()
    for mode in sorted(by_mode, key=lambda m: order.index(m) if m in order else len(order)):
        counts = by_mode[mode]
        judged = sum(n for status, n in counts.items() if status not in NOT_JUDGED)
        passing = sum(counts[s] for s in PASSING)
        result[mode] = {"counts": dict(counts), "judged": judged,
                        "pass_rate": round(passing / judged, 4) if judged else None}
    return result


def fallback_shares(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """How the cases that passed or fell back illegally were served: pass-native, pass-fallback, illegal-fallback."""
    counts = Counter()
    for case in cases:
        route = case.get("route", "")
        if route == "illegal-fallback":
            counts[route] += 1
        elif route and case["status"] in PASSING:
            counts[f"pass-{route}"] += 1
    total = sum(counts.values())
    verdicts = ("pass-native", "pass-fallback", "illegal-fallback")
    return {"counts": {v: counts[v] for v in verdicts}, "total": total,
            "shares": {v: round(counts[v] / total, 4) if total else None for v in verdicts}}


def failed(report: dict[str, Any]) -> bool:
    """A run fails on any fail, crash or timeout, or a failed runtime check (xpass is reported, not failed)."""
    return any(c["status"] in FAILING for c in [*report["cases"], *report["runtime_checks"]])


def interruption(report: dict[str, Any]) -> str:
    """How far an interrupted run got, for every report format (empty for a run that finished)."""
    if not report.get("interrupted"):
        return ""
    groups = report["groups"]
    return (f"(Ctrl-C) after {report['wall_s']:.1f} s, {groups['done']} of {groups['planned']} "
            f"op×dtype groups done; the counts are of the {len(report['cases'])} cases that finished")


def write_json(report: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")  # strict JSON: browsers parse it
    return path


def load(path: str | Path) -> dict[str, Any]:
    report = json.loads(Path(path).read_text())
    if report.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a torchplug check report of schema {SCHEMA} (schema={report.get('schema')!r})")
    return report
