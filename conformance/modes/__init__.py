"""The conformance modes: each module of this package that defines `MODE` (a `Mode`, record.py) is one.

A mode is added by writing one module here; nothing else names it. Its `follows` field places it in
the list (the order --modes shows, reports list and a group's cases run in); a mode that follows no
mode, or takes the place of another one, is refused when the package loads, naming both.
Shared machinery: sides.py (the CPU and device sides of a case), forward.py (how value modes run).
"""

import functools
import importlib
import pkgutil
from typing import Any

import torch

from ..cases.opinfo import OpEntry
from ..target import Target
from .record import Mode
from .sides import Skip, Unsupported, first_line

__all__ = ["MODES", "Mode", "Skip", "Target", "Unsupported", "all_modes", "case_input", "first_line", "inputs_for",
           "mode"]


@functools.cache
def all_modes() -> tuple[Mode, ...]:
    """Every mode, in the order their `follows` fields give."""
    found: dict[str, Mode] = {}
    for module in pkgutil.iter_modules(__path__):
        record = getattr(importlib.import_module(f"{__name__}.{module.name}"), "MODE", None)
        if isinstance(record, Mode):
            found[record.name] = record
    return _ordered(found)


def _ordered(found: dict[str, Mode]) -> tuple[Mode, ...]:
    after: dict[str | None, Mode] = {}
    for record in found.values():
        if record.follows is not None and record.follows not in found:
            raise ImportError(f"conformance mode {record.name!r} follows {record.follows!r}, which is no mode; "
                              f"the modes are: {', '.join(sorted(found))}")
        if (taken := after.setdefault(record.follows, record)) is not record:
            place = f"after {record.follows!r}" if record.follows else "first"
            raise ImportError(f"conformance modes {taken.name!r} and {record.name!r} both come {place}: "
                              f"give one of them follows={taken.name!r}")
    order, last = [], None
    while last in after:
        last = after[last].name
        order.append(found[last])
    if missing := sorted(set(found) - {record.name for record in order}):  # no first mode, or a cycle
        raise ImportError(f"conformance modes {', '.join(missing)} do not follow from the first mode (follows=None)")
    return tuple(order)


def mode(name: str) -> Mode:
    for record in all_modes():
        if record.name == name:
            return record
    raise KeyError(f"no conformance mode {name!r}; the modes are: {', '.join(mode_names())}")


def mode_names() -> tuple[str, ...]:
    return tuple(record.name for record in all_modes())


def __getattr__(name: str) -> Any:
    if name == "MODES":  # the names, in order (cases.MODES before the package split)
        return mode_names()
    if name == "RUNNERS":  # deprecated: mode(name).run (repro snippets of reports written before the split)
        return {record.name: record.run for record in all_modes()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _count(indices: list[list[int] | None]) -> int | None:
    """How many inputs cover these modes' indices (None: every input)."""
    return None if None in indices else max((max(i, default=-1) for i in indices), default=-1) + 1


def inputs_for(entry: OpEntry, dtype: torch.dtype, wanted: dict[str, list[int] | None],
               device_type: str = "cpu") -> dict[str, list[Any]]:
    """What each mode's cases run, by index: a mode's own inputs (the errors mode's error inputs, with
    what OpInfo documents for `device_type`), or the op's samples (generated once and shared by every
    mode that runs them). `wanted` gives each mode's indices, None for all."""
    sampled = [indices for name, indices in wanted.items() if mode(name).inputs is None]
    samples = entry.samples(dtype, _count(sampled)) if sampled else []
    return {name: samples if (own := mode(name).inputs) is None else own(entry, dtype, device_type)[:_count([indices])]
            for name, indices in wanted.items()}


def case_input(entry: OpEntry, dtype: torch.dtype, mode_name: str, index: int, target: Target) -> Any:
    """One case's sample (or the mode's own input), exactly as the suite generated it (for repro snippets)."""
    return inputs_for(entry, dtype, {mode_name: [index]}, target.device.type)[mode_name][index]
