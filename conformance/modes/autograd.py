"""The `autograd` mode: the gradients of the sum of the op's outputs, held to the CPU's."""

from typing import Any

import torch

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, compare, outputs
from .record import Mode
from .sides import Skip, detach, host, misplaced, on_cpu, on_device, on_target, sample_args, widen


def _scalar_loss(result: Any) -> torch.Tensor | None:
    terms = [torch.view_as_real(t).sum() if t.is_complex() else t.sum()
             for t in outputs(result) if isinstance(t, torch.Tensor) and t.requires_grad]
    return sum(terms) if terms else None


def _gradients(entry: OpEntry, sample: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    result = sample.output_process_fn_grad(entry.op(*args, **kwargs))
    inputs = [t for t in outputs([args, kwargs]) if isinstance(t, torch.Tensor) and t.requires_grad]
    loss = _scalar_loss(result)
    if loss is None or not inputs:
        raise Skip("the sample has no differentiable output or input")
    return list(torch.autograd.grad(loss, inputs, allow_unused=True))


def autograd(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    args, kwargs = sample_args(sample)
    expected = on_cpu(target, lambda: _gradients(entry, sample, detach(args, True), detach(kwargs, True)))
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target, grad=True))
    actual = on_target(lambda: _gradients(entry, sample, dev_args, dev_kwargs))
    if wrong_device := misplaced(actual, target):
        return Verdict(False, "gradient " + wrong_device)

    def float64() -> list[Any]:
        with target.reference():
            return outputs(_gradients(entry, sample, widen(args, True), widen(kwargs, True)))
    return compare(outputs(host(actual)), outputs(expected), float64)


MODE = Mode("autograd", autograd, follows="eager", holds_to="values", samples={"smoke": 1, "standard": 2},
            applies=lambda entry, dtype: entry.requires_grad(dtype), pytorch_test=("TestBwdGradients", "test_fn_grad"))
