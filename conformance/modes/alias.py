"""The `alias` mode: a result shares memory with an input exactly when the CPU's result does, and an
in-place op writes through a view into its base.

Sharing is judged by storage (the data pointer of each tensor's untyped storage), not by `_base`:
autograd marks the result of a view op as a view of its input whatever the kernel returned, so a
kernel that copies still has a `_base`. A view must also start where the CPU's does (its storage
offset); its strides are the layout mode's business.
"""

from typing import Any

import torch

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, compare, outputs, statistics
from .record import Mode
from .sides import detach, host, on_cpu, on_device, on_target, sample_args, widen


def _storage(t: Any) -> int | None:
    """The address of `t`'s storage, None when it has none to share (not a tensor, not strided, empty)."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return None
    storage = t.untyped_storage()
    return storage.data_ptr() if storage.nbytes() else None


def _describe(result: Any, inputs: list[Any]) -> list[str]:
    """Per tensor result, what it shares memory with: "fresh", or the inputs and earlier results."""
    inputs_at = [_storage(t) for t in inputs]
    results = [t for t in outputs(result) if isinstance(t, torch.Tensor)]
    descriptions = []
    for i, t in enumerate(results):
        here = _storage(t)
        shared = [f"input {j}" for j, there in enumerate(inputs_at) if here is not None and there == here]
        shared += [f"output {j}" for j in range(i) if here is not None and _storage(results[j]) == here]
        descriptions.append(f"a view of {' and '.join(shared)} at offset {t.storage_offset()}" if shared else "fresh")
    return descriptions


def _sharing(entry: OpEntry, sample: Any, target: Target) -> str:
    """'' when the device's results alias its inputs as the CPU's do, else what differs."""
    args, kwargs = sample_args(sample)
    cpu_args, cpu_kwargs = detach(args), detach(kwargs)
    expected = on_cpu(target, lambda: entry.op(*cpu_args, **cpu_kwargs))
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target))
    actual = on_target(lambda: entry.op(*dev_args, **dev_kwargs))
    want = _describe(expected, outputs([cpu_args, cpu_kwargs]))
    got = _describe(actual, outputs([dev_args, dev_kwargs]))
    if len(got) != len(want):
        return f"{len(got)} tensor outputs, the CPU gave {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"output {i} is {g}; on the CPU it is {w}"
    return ""


def _strided_view(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(base, view): a view of `t`'s values with a gap after every element and one element before."""
    base = torch.zeros(2 * t.numel() + 1, dtype=t.dtype, device=t.device)
    strides, step = [], 2
    for size in reversed(t.shape):
        strides.insert(0, step)
        step *= max(size, 1)
    view = base.as_strided(t.shape, strides, 1)
    view.copy_(t)
    return base, view


def _through_view(entry: OpEntry, sample: Any, target: Target) -> str:
    """'' when the in-place variant, run on a strided view, writes into the view's base as on the CPU."""
    args, kwargs = sample_args(sample)
    first = args[0]
    if entry.inplace is None or not isinstance(first, torch.Tensor) or first.numel() == 0:
        return ""
    try:
        with target.reference():
            cpu_base, cpu_view = _strided_view(first.detach())
            entry.inplace(cpu_view, *detach(args[1:]), **detach(kwargs))
    except Exception:
        return ""  # the CPU has no in-place form for this sample (a dtype it cannot write back, ...)
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target))
    dev_base, dev_view = on_target(lambda: _strided_view(dev_args[0]))
    returned = on_target(lambda: entry.inplace(dev_view, *dev_args[1:], **dev_kwargs))
    if returned is not dev_view:
        return "the in-place variant did not return the tensor it was given"
    kind = entry.nondeterministic  # random in-place ops (uniform_, ...): the base's statistics, not its values

    def in_float64() -> list[Any]:  # the arbiter of a rounding difference (a GPU's scan sums in another order)
        with target.reference():
            base, view = _strided_view(widen(first.detach()))
            entry.inplace(view, *widen(detach(args[1:])), **widen(detach(kwargs)))
            return [base]
    verdict = (statistics([host(dev_base)], [cpu_base], kind) if kind
               else compare([host(dev_base)], [cpu_base], in_float64))
    return "" if verdict.ok else f"the in-place variant on a strided view did not write through to its base: {verdict.detail}"


def alias(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    problem = _sharing(entry, sample, target) or _through_view(entry, sample, target)
    return Verdict(not problem, problem)


MODE = Mode("alias", alias, follows="scalar_types", holds_to="semantics", samples={"smoke": 1, "standard": 3},
            category="layout")
