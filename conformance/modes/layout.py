"""The `layout` mode: results have the CPU's strides for the same inputs, in every dense layout.

Each case runs the sample in up to four layouts, built on the CPU and copied over with their
strides: as given; 4-D inputs channels_last and 5-D channels_last_3d; the last two dimensions swapped
in memory (column-major, which preserve_format, `*_like` factories and elementwise ops keep); and,
for ops with out=, empty out= tensors that the op resizes. Strides of dimensions of size 0 or 1
carry no layout and are not compared. A result laid out as torch's meta function says the device's
own kernels lay it out (meta.py: cuFFT's and cuSOLVER's layouts on cuda) is right where the CPU's
differs.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, outputs
from .meta import MetaReference
from .record import Mode
from .sides import Skip, detach, on_cpu, on_device, on_target, sample_args


def _strided(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and t.numel() > 1


def _channels_last(t: Any) -> Any:
    if _strided(t) and t.dim() in (4, 5):
        return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    return t


def _column_major(t: Any) -> Any:
    if _strided(t) and t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    return t


def _layout(t: Any) -> tuple[int, ...] | None:
    """The strides that say something about memory order: those of dimensions longer than 1."""
    if not _strided(t):
        return None
    return tuple(stride for size, stride in zip(t.shape, t.stride()) if size > 1)


def _difference(actual: list[Any], expected: list[Any], what: str, meta: MetaReference | None = None) -> str:
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and a.shape == e.shape \
                and _layout(a) != _layout(e) and not (meta is not None and meta.says(i, a)):
            return f"{what}: output {i} of shape {tuple(e.shape)} has strides {tuple(a.stride())}, the CPU's {tuple(e.stride())}"
    return ""


def _run(entry: OpEntry, sample: Any, target: Target, relayout: Callable[[Any], Any], what: str,
         out: bool = False) -> str:
    args, kwargs = sample_args(sample)
    args = tree_map(relayout, detach(args))
    if relayout is not _as_given and all(_layout(a) == _layout(b) for a, b in
                                         zip(outputs(args), outputs(sample_args(sample)[0]))):
        return ""  # no input has a layout this variant changes
    expected = on_cpu(target, lambda: entry.op(*args, **_out_buffers(entry, args, kwargs, "cpu", out)))
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target))
    if moved := _difference(outputs(dev_args), outputs(args), f"{what}: copying an input to the device"):
        return moved
    actual = on_target(lambda: entry.op(*dev_args, **_out_buffers(entry, args, dev_kwargs, target.device, out)))
    # where torch's meta function for the device gives the device's layout (cuFFT's, cuSOLVER's), that is right
    meta = None if out else MetaReference(entry, args, kwargs, target)
    return _difference(outputs(actual), outputs(expected), what, meta)


def _out_buffers(entry: OpEntry, args: list[Any], kwargs: dict[str, Any], device: Any, out: bool) -> dict[str, Any]:
    """`kwargs`, plus (for the out= variant) an empty out= tensor per result, for the op to resize."""
    if not out:
        return kwargs
    results = outputs(entry.op(*detach(args), **detach(kwargs)))
    if not results or not all(isinstance(r, torch.Tensor) for r in results):
        raise Skip("the op's result is not only tensors")
    buffers = [torch.empty(0, dtype=r.dtype, device=device) for r in results]
    return {**kwargs, **entry.out_kwargs(buffers[0] if len(buffers) == 1 else tuple(buffers))}


def _as_given(t: Any) -> Any:
    return t


# (what the variant is, how inputs are laid out, whether out= tensors are passed)
VARIANTS: tuple[tuple[str, Callable[[Any], Any], bool], ...] = (
    ("inputs as given", _as_given, False),
    ("channels_last inputs", _channels_last, False),
    ("column-major inputs", _column_major, False),
    ("out= tensors resized by the op", _as_given, True),
)


def layout(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    for what, relayout, out in VARIANTS:
        if out and not entry.supports_out:
            continue
        try:
            problem = _run(entry, sample, target, relayout, what, out)
        except Skip:
            if relayout is _as_given and not out:
                raise  # the CPU rejects the sample itself
            continue  # the CPU rejects this layout (view on column-major inputs, ...): nothing to hold to
        if problem:
            return Verdict(False, problem)
    return Verdict(True)


MODE = Mode("layout", layout, follows="alias", holds_to="semantics", samples={"smoke": 1, "standard": 2},
            category="layout")
