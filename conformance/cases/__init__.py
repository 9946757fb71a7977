"""What a run is made of: the ops and their samples (opinfo.py, aten_db.py), the case record
(case.py), the tiers (tiers.py) and the plan that turns a selection into groups of cases (plan.py)."""

from typing import Any

from .case import Case, CaseResult

__all__ = ["Case", "CaseResult"]


def __getattr__(name: str) -> Any:
    if name == "MODES":  # deprecated: torchplug.conformance.modes.mode_names()
        from ..modes import mode_names

        return mode_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
