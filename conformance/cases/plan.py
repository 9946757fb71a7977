"""Turn a Selection into groups of cases: one group per (op, dtype), its samples shared by every mode."""

import os
from dataclasses import dataclass, field
from typing import Any

from ..verdicts.manifest import Manifest
from .case import Case, CaseResult
from .tiers import Selection, tier_ops, wanted


@dataclass
class Group:
    op: str
    dtype: str
    modes: dict[str, list[int] | None]  # sample indices per mode; None: the tier's limit
    limit: dict[str, int | None] = field(default_factory=dict)

    def request(self, done: set[str]) -> dict:
        modes = {mode: (indices if indices is not None else
                        (list(range(self.limit[mode])) if self.limit.get(mode) is not None else None))
                 for mode, indices in self.modes.items()}
        return {"op": self.op, "dtype": self.dtype, "modes": modes, "done": sorted(done)}


@dataclass
class Plan:
    groups: list[Group]
    unrunnable: list[CaseResult]  # decided without running: dtypes the backend does not have
    mode_notes: dict[str, str]  # mode -> why it cannot run at all on this backend


def make_plan(selection: Selection, backend_dtypes: set[str], compile_reason: str | None,
              manifest: Manifest | None = None) -> Plan:
    import torch

    from ..modes import mode
    from . import opinfo

    entries = opinfo.all_ops()
    names = [n for n in entries if wanted(selection, n)]
    modes = [mode(name) for name in selection.modes]
    mode_notes = {m.name: compile_reason for m in modes if m.needs_compile and compile_reason is not None}
    modes = [m for m in modes if m.name not in mode_notes]
    per_mode = {m.name: set(names if selection.op else tier_ops(selection.tier, names, m)) for m in modes}
    one_dtype = ("float32",) if "float32" in selection.dtypes else selection.dtypes[:1]
    groups, unrunnable = [], []
    for name in names:
        entry = entries[name]
        for dtype_name in selection.dtypes:
            dtype = getattr(torch, dtype_name)
            if dtype not in entry.dtypes:
                continue  # the CPU has no kernel either: nothing to hold the device to
            chosen = {}
            for m in modes:
                if name not in per_mode[m.name] or not m.applies(entry, dtype):
                    continue
                if selection.tier in m.one_dtype_in and dtype_name not in one_dtype and not selection.op:
                    continue
                skip = manifest and manifest.entry_for(Case(name, dtype_name, m.name, 0), selection.tier, "skip")
                if skip:
                    unrunnable.append(CaseResult(Case(name, dtype_name, m.name, selection.sample or 0), "skip",
                                                 "skipped by the manifest", manifest_reason=skip.reason))
                    continue
                chosen[m.name] = [selection.sample] if selection.sample is not None else None
            if not chosen:
                continue
            if dtype_name not in backend_dtypes:
                unrunnable += [CaseResult(Case(name, dtype_name, m, selection.sample or 0), "unsupported-dtype",
                                          f"the backend does not list {dtype_name} in its BackendSpec.dtypes")
                               for m in chosen]
                continue
            groups.append(Group(name, dtype_name, chosen, {m: mode(m).sample_count(selection.tier) for m in chosen}))
    return Plan(groups, unrunnable, mode_notes)


def plan_on(runner: Any, selection: Selection, manifest: Manifest) -> tuple[Plan, dict[str, Any]]:
    """Ask the started workers what the backend offers, and plan `selection` against it: the one way
    `torchplug check` and the pytest plugin plan. Returns the plan and the workers' hello."""
    info = runner.hello()
    manifest.runtime = info["mode"]  # entries scoped to a runtime (native or emulated) apply from here on
    return make_plan(selection, set(info["dtypes"]), info["compile_reason"], manifest), info


def worker_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The workers' environment: one OpenMP thread each unless set, since parallelism comes from the workers."""
    env = {**os.environ, **(extra or {})}
    env.setdefault("OMP_NUM_THREADS", "1")
    return env
