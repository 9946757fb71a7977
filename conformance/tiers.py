"""Tiers: which ops, dtypes, modes and how many samples a run covers."""

import re
from dataclasses import dataclass

from ..dispatcher.portable import PUBLIC_OPS
from .cases import MODES

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
# torch.compile costs seconds per graph (and each worker imports Inductor once), so the smaller
# tiers compile a sample of ops: smoke compiles one fused reduction.
COMPILE_SMOKE = ("softmax",)
COMPILE_STANDARD = (
    "add", "mul", "div.no_rounding_mode", "exp", "tanh", "sigmoid", "where", "clamp", "sum", "mean", "amax",
    "cumsum", "var", "softmax", "log_softmax", "mm", "bmm", "addmm", "cat", "reshape", "permute", "index_select",
    "gather", "masked_fill", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.layer_norm", "nn.functional.linear", "nn.functional.embedding", "nn.functional.conv2d",
    "torchplug.rms_norm", "torchplug.silu_and_mul",
)
# Samples per (op, dtype) and mode; None is every sample.
# The errors mode's "samples" are error inputs: OpInfo's, then out-of-range variants (errors.py).
SAMPLES: dict[str, dict[str, int | None]] = {
    "smoke": {"eager": 2, "autograd": 1, "out": 1, "noncontiguous": 2, "compile": 1,
              "alias": 1, "layout": 1, "errors": 2, "meta": 1, "edge": 1, "scalar_types": 1},
    "standard": {"eager": 6, "autograd": 2, "out": 6, "noncontiguous": 1, "compile": 1,
                 "alias": 3, "layout": 2, "errors": None, "meta": 3, "edge": 2, "scalar_types": 3},
    "full": {mode: None for mode in MODES},
}


@dataclass
class Selection:
    """What the user asked for on top of the tier."""

    tier: str = "smoke"
    modes: tuple[str, ...] = MODES
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    ops: str | None = None  # a regular expression over op names (--ops)
    op: str | None = None  # exactly this op (--op, from a repro line)
    sample: int | None = None  # exactly this sample index (--sample)


def default_dtypes(tier: str) -> tuple[str, ...]:
    """The dtypes a tier runs when none are asked for."""
    return DEFAULT_DTYPES if tier == "smoke" else WIDE_DTYPES


def tier_ops(tier: str, all_names: list[str], mode: str) -> list[str]:
    if tier == "full":
        return all_names
    if mode == "compile":
        chosen = COMPILE_SMOKE if tier == "smoke" else COMPILE_STANDARD
    else:
        chosen = SMOKE_OPS if tier == "smoke" else all_names
    return [name for name in all_names if name in chosen]


def wanted(selection: Selection, name: str) -> bool:
    if selection.op is not None:
        return name == selection.op
    return selection.ops is None or re.search(selection.ops, name) is not None
