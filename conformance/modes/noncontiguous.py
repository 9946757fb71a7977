"""The `noncontiguous` mode: the sample's inputs with gaps in memory, same values."""

from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, outputs
from .forward import run_forward
from .record import Mode
from .sides import Skip, sample_args


def noncontiguous(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """Inputs made non-contiguous (same values, gaps in memory) on the device and on the CPU alike:
    a kernel that rejects such inputs on the CPU too is skipped, not failed."""
    from torch.testing._internal.common_utils import noncontiguous_like

    def spread(x: Any) -> Any:
        return tree_map(lambda t: noncontiguous_like(t) if isinstance(t, torch.Tensor) and t.numel() > 1 else t, x)
    args, _ = sample_args(sample)
    if not any(isinstance(t, torch.Tensor) and t.numel() > 1 for t in outputs(args)):
        raise Skip("no input with more than one element to make non-contiguous")
    return run_forward(entry, sample, target, layout=spread)


MODE = Mode("noncontiguous", noncontiguous, follows="out", holds_to="values", samples={"smoke": 2, "standard": 1},
            pytorch_test=("TestCommon", "test_noncontiguous_samples"))
