"""The `scalar_types` mode: integer or bool tensors where the samples use floating ones.

OpInfo samples give every tensor argument the case's dtype, so `ldexp(x, exponent)` is only ever
called with a floating exponent and a kernel that mishandles an integer one goes unseen. Each
floating tensor argument after the first (the first input is covered by the integer dtypes) is
replaced by its values rounded to int64, then by bool (non-zero); the CPU decides which variants
are valid (type promotion, or a refusal that makes the variant unjudged).
"""

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, outputs
from .forward import judge_variants
from .record import Mode
from .sides import Skip

# Clamped before the cast: a float past int64's range (inf, 1e30) converts to an unspecified value.
_KINDS = {
    "int64 arguments": lambda t: t.detach().round().clamp(-64, 64).to(torch.int64),
    "bool arguments": lambda t: t.detach() != 0,
}


def _is_float(t: Any) -> bool:
    """A floating tensor to swap; float8 ones (_scaled_mm's) stay: the CPU cannot even round them."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.element_size() > 1


def scalar_type_variants(sample: Any) -> Iterator[tuple[str, Any]]:
    """(what the variant is, the variant sample) for each kind, when the sample has a floating tensor
    argument besides its first input."""
    if not any(_is_float(t) for t in outputs([sample.args, sample.kwargs])):
        return
    for what, convert in _KINDS.items():
        def swap(x: Any) -> Any:
            return tree_map(lambda t: convert(t) if _is_float(t) else t, x)
        yield what, type(sample)(sample.input, args=swap(sample.args), kwargs=swap(sample.kwargs),
                                 output_process_fn_grad=sample.output_process_fn_grad, name=sample.name)


def scalar_types(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """Integer and bool tensors where the sample has floating ones after its first input
    (scalar_types.py): ldexp's integer exponent, a bool mask given as floats."""
    if not entry.validates_inputs:
        raise Skip("an internal kernel trusts its caller for its arguments' dtypes (OpEntry.validates_inputs)")
    variants = list(scalar_type_variants(sample))
    if not variants:
        raise Skip("no floating tensor argument besides the first input")
    return judge_variants(entry, iter(variants), target, False, "the CPU rejects integer and bool arguments here")


MODE = Mode("scalar_types", scalar_types, follows="edge", holds_to="values", samples={"smoke": 1, "standard": 3})
