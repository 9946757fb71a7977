"""The `edge` mode: the sample at the edges of values and shapes, where kernels go wrong.

  edge values   every floating strided input filled with +0, -0, +inf, -inf, NaN, the smallest
                subnormal, the largest finite value, and ±1 (repeated over its elements, in this
                order); sparse inputs keep their values
  empty input   the first input with its first dimension cut to 0 (a strided one)
  0-dim input   the first input's first element as a 0-dim tensor (a strided one)

Variants are built on the CPU, in the sample's own dtype, so the device, the CPU and the float64
reference all see the same numbers.
"""

import math
from collections.abc import Iterator
from typing import Any

import torch

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, outputs
from .forward import judge_variants
from .record import Mode


def _edge_values(dtype: torch.dtype) -> list[float]:
    info = torch.finfo(dtype)
    return [0.0, -0.0, math.inf, -math.inf, math.nan, info.smallest_normal * info.eps, info.max, 1.0, -1.0]


def _fillable(t: Any) -> bool:
    """A floating strided tensor with elements (a sparse tensor's values cannot be copied into as a whole)."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.layout == torch.strided and t.numel() > 0


def _fill(t: Any) -> Any:
    if not _fillable(t):
        return t
    pattern = torch.tensor(_edge_values(t.dtype), dtype=t.dtype)
    values = pattern.repeat(t.numel() // len(pattern) + 1)[:t.numel()].reshape(t.shape)
    return t.detach().clone().copy_(values).requires_grad_(t.requires_grad)


def edge_variants(sample: Any, fixed_shape: bool = False) -> Iterator[tuple[str, Any]]:
    """(what the variant is, the variant sample) for each variant that changes something. With
    `fixed_shape`, no shape variants: an op that writes its first input (resize_) leaves undefined values
    in the memory it grows, and an internal kernel (a backward's grad_output) trusts its caller for the shape."""
    first = sample.input
    if any(_fillable(t) for t in outputs([first, sample.args, sample.kwargs])):
        yield "edge values", sample.transform(_fill)
    if (isinstance(first, torch.Tensor) and first.layout == torch.strided and first.dim() >= 1 and first.numel() > 0
            and not fixed_shape):
        yield "empty input", _with_input(sample, first.detach()[:0].clone())
        yield "0-dim input", _with_input(sample, first.detach().reshape(-1)[0].clone())


def _with_input(sample: Any, new: torch.Tensor) -> Any:
    return type(sample)(new.requires_grad_(sample.input.requires_grad), args=sample.args, kwargs=sample.kwargs,
                        output_process_fn_grad=sample.output_process_fn_grad, name=sample.name)


def edge(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """The sample at the edges of values and shapes (edge_variants above), each variant held to the CPU's
    results, a zero's sign included. A variant the CPU rejects (an empty input some ops refuse) is not judged."""
    # resize_, resize_as_ write their input; internal kernels trust their caller for its shape
    variants = edge_variants(sample, fixed_shape=entry.name.endswith("_") or not entry.validates_inputs)
    return judge_variants(entry, variants, target, True, "the CPU rejects every edge variant of this sample")


MODE = Mode("edge", edge, follows="compile", holds_to="values", samples={"smoke": 1, "standard": 2})
