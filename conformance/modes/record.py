"""What a conformance mode is: one record, in the mode's own module, holds all the suite knows of it.

A mode is a way to run an op's sample on the device and hold the result to the CPU's. The planner
(cases/plan.py), the tiers (cases/tiers.py), the workers (running/), the manifest's category guess
(verdicts/manifest.py) and the PyTorch export (report/export_pytorch.py) read these fields and name
no mode themselves, so a mode is added by one new module in this package (modes/__init__.py finds it).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict

# (op, sample or the mode's own input, device under test) -> Verdict; raises Skip or Unsupported (sides.py)
Runner = Callable[[OpEntry, Any, Target], Verdict]
# (op, dtype, device type) -> the mode's own inputs, for a mode that does not run the op's OpInfo samples
Inputs = Callable[[OpEntry, torch.dtype, str], list[Any]]


def _always(entry: OpEntry, dtype: torch.dtype) -> bool:
    return True


@dataclass(frozen=True)
class Mode:
    name: str  # as in --modes, reports and manifests
    run: Runner
    follows: str | None  # the mode listed, and run within an (op, dtype) group, just before this one; None: first
    holds_to: Literal["values", "semantics"]  # the CPU's values, or its aliasing, strides, exceptions, meta shapes
    samples: dict[str, int | None]  # inputs per (op, dtype) in each tier below full (None: all); full runs all
    inputs: Inputs | None = None  # None: the op's OpInfo samples, generated once and shared with the other modes
    applies: Callable[[OpEntry, torch.dtype], bool] = _always  # whether the (op, dtype) has a case in this mode
    tier_ops: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a tier's own op list, where not the tier's
    one_dtype_in: tuple[str, ...] = ()  # tiers that run it on one dtype only (float32 if selected), unless --op
    needs_compile: bool = False  # cannot run where torch.compile has no target for the device
    slow: bool = False  # seconds per case: its groups start first and its cases get SLOW_TIMEOUT_FACTOR x --timeout
    pytorch_test: tuple[str, str] | None = None  # (generic test class, test) checking the same in PyTorch's suite
    category: str = ""  # the manifest category --update-manifest guesses for its failures ("": from the cause)

    def sample_count(self, tier: str) -> int | None:
        """How many inputs per (op, dtype) the tier runs (None: all of them)."""
        return self.samples.get(tier)


SLOW_TIMEOUT_FACTOR = 5
