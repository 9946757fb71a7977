"""Failure groups: cases that fail the same way, so a reader (or a manifest) sees causes, not lines."""

import re
from dataclasses import dataclass, field
from typing import Any

from ..verdicts.status import PROBLEMS


def cause(detail: str) -> str:
    """The detail with its numbers, shapes and locations blanked: equal causes compare equal."""
    text = detail.split("; float64 arbitration")[0]
    text = re.sub(r"\(at .*?\)$", "", text)
    text = re.sub(r"\[[^\]]*\]|\([^)]*\)", "(...)", text)
    text = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", text)
    return text.strip()[:160]


@dataclass
class FailureGroup:
    status: str
    mode: str
    cause: str
    cases: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        return sorted({c["op"] for c in self.cases})

    @property
    def dtypes(self) -> list[str]:
        return sorted({c["dtype"] for c in self.cases})


def failure_groups(cases: list[dict[str, Any]], statuses: tuple[str, ...] = PROBLEMS) -> list[FailureGroup]:
    """Problem cases grouped by (status, mode, cause), largest group first."""
    groups: dict[tuple[str, str, str], FailureGroup] = {}
    for case in cases:
        if case["status"] in statuses:
            key = (case["status"], case["mode"], cause(case["detail"]))
            groups.setdefault(key, FailureGroup(*key)).cases.append(case)
    return sorted(groups.values(), key=lambda g: (-len(g.cases), g.status, g.mode, g.cause))
