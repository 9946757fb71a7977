"""The `eager` mode: the op on the device, held to the CPU's values."""

from typing import Any

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict
from .forward import run_forward
from .record import Mode


def eager(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    return run_forward(entry, sample, target)


MODE = Mode("eager", eager, follows=None, holds_to="values", samples={"smoke": 2, "standard": 6},
            pytorch_test=("TestCommon", "test_compare_cpu"))
