"""Tiers: which ops, dtypes, modes and how many samples a run covers."""

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...dispatcher.portable import PUBLIC_OPS

if TYPE_CHECKING:
    from ..modes.record import Mode

TIERS = ("smoke", "standard", "full")
DEFAULT_DTYPES = ("float32", "float16", "bfloat16")
# Integer and bool cases reach what floats never do (bitwise and shift ops, gcd, bincount, integer
# reductions): the standard tier and above run them too.
WIDE_DTYPES = DEFAULT_DTYPES + ("int64", "bool")

# About sixty core ops: arithmetic, math, reductions, shapes, indexing, linear algebra, NN layers.
SMOKE_OPS = (
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos",
    "tanh", "sigmoid", "pow", "clamp", "where", "maximum", "minimum", "eq", "lt", "sum", "mean", "amax",
    "argmax", "prod", "cumsum", "var", "std", "norm", "softmax", "log_softmax", "mm", "bmm", "matmul", "addmm",
    "baddbmm", "cat", "stack", "reshape", "view", "transpose", "permute", "flatten", "expand", "index_select",
    "gather", "scatter", "masked_fill", "topk", "sort", "nn.functional.relu", "nn.functional.gelu",
    "nn.functional.silu", "nn.functional.layer_norm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.embedding", "nn.functional.cross_entropy", "nn.functional.dropout", "zeros_like", "arange",
    *(f"torchplug.{op}" for op in PUBLIC_OPS),
)


@dataclass
class Selection:
    """What the user asked for on top of the tier."""

    tier: str = "smoke"
    modes: tuple[str, ...] = field(default_factory=lambda: _mode_names())  # every mode
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    ops: str | None = None  # a regular expression over op names (--ops)
    op: str | None = None  # exactly this op (--op, from a repro line)
    sample: int | None = None  # exactly this sample index (--sample)


def default_dtypes(tier: str) -> tuple[str, ...]:
    """The dtypes a tier runs when none are asked for."""
    return DEFAULT_DTYPES if tier == "smoke" else WIDE_DTYPES


def tier_ops(tier: str, all_names: list[str], mode: "Mode") -> list[str]:
    """The ops `mode` runs in `tier`: its own list where it has one (compile), else the tier's."""
    if tier == "full":
        return all_names
    chosen = mode.tier_ops.get(tier) or (SMOKE_OPS if tier == "smoke" else all_names)
    return [name for name in all_names if name in chosen]


def wanted(selection: Selection, name: str) -> bool:
    if selection.op is not None:
        return name == selection.op
    return selection.ops is None or re.search(selection.ops, name) is not None


def _mode_names() -> tuple[str, ...]:
    from ..modes import mode_names  # the modes read the tiers: imported when a Selection is made

    return mode_names()
