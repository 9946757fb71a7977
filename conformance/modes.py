"""The five ways a case runs an op on the device, each against the CPU running the same sample.

Every mode returns a `Verdict` (compare.py) or raises `Unsupported`/`Skip`. An exception from the
device side is the device's failure; an exception from the CPU side means the sample itself is
not runnable, and the case is skipped.
"""

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

from .compare import Verdict, compare, outputs, statistics
from .opinfo import OpEntry

# The emulated runtime (and well-behaved plugins) refuse dtypes a device lacks with this wording.
_DTYPE_REFUSAL = re.compile(r"does not support (torch\.\w+)")


class Skip(Exception):
    """The case cannot say anything about the device (the CPU rejects the sample, ...)."""


class Unsupported(Exception):
    """The device refuses the case's dtype, or the mode cannot run on this backend."""


@dataclass
class Target:
    """The device under test and the CPU reference it is held to."""

    backend: str
    device: torch.device
    reference: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    compile_reason: str | None = None  # why torch.compile cannot target the device, None if it can
    dtypes: frozenset[torch.dtype] = frozenset()  # the backend's BackendSpec.dtypes


def _detach(x: Any, grad: bool = False) -> Any:
    def leaf(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        return t.detach().clone().requires_grad_(grad and t.requires_grad)
    return tree_map(leaf, x)


def _to(x: Any, device: torch.device, grad: bool = False) -> Any:
    def leaf(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        # Always a copy: on the CPU backend .to() would hand back the sample itself (in-place ops would
        # change it, and views would keep the sample's storage offset where the reference has none).
        return t.detach().to(device, copy=True).requires_grad_(grad and t.requires_grad)
    return tree_map(leaf, x)


def _is_cpu_device(x: Any) -> bool:
    return (isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and x == "cpu")


def _on_device(entry: OpEntry, args: list[Any], kwargs: dict[str, Any], target: Target,
               grad: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """The sample's arguments for the device run: tensors moved (except those the op reads on the
    host), and a CPU named as the result's device (factory samples, `to`) replaced by the device."""
    moved = [a if i in entry.host_args else _to(a, target.device, grad) for i, a in enumerate(args)]
    moved = [target.device if _is_cpu_device(a) else a for a in moved]
    kwargs = _to(kwargs, target.device, grad)
    if "device" in kwargs:
        kwargs["device"] = target.device
    return moved, kwargs


def _host(x: Any) -> Any:
    return tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, x)


def _widen(x: Any, grad: bool = False) -> Any:
    """Floating and complex tensors in double precision (for the float64 reference)."""
    def leaf(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and (t.is_complex() or t.is_floating_point()):
            wide = t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
            return wide.requires_grad_(grad and t.requires_grad)
        return _detach(t, grad)
    return tree_map(leaf, x)


def _args(sample: Any) -> tuple[list[Any], dict[str, Any]]:
    return [sample.input, *sample.args], dict(sample.kwargs)


def _has_tensor(x: Any) -> bool:
    return any(isinstance(t, torch.Tensor) for t in outputs(x))


def _cpu(target: Target, fn: Callable[[], Any]) -> Any:
    try:
        with target.reference():
            return fn()
    except Exception as err:
        raise Skip(f"the CPU rejects this sample: {type(err).__name__}: {first_line(err)}") from err


def _device(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as err:
        if refused := _DTYPE_REFUSAL.search(str(err)):
            raise Unsupported(f"the device refuses {refused.group(1)}: {first_line(err)}") from err
        raise


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def _check_devices(result: Any, target: Target) -> str:
    for i, t in enumerate(outputs(result)):
        if isinstance(t, torch.Tensor) and t.device.type != target.device.type:
            return f"output {i} is on {t.device}, expected {target.device.type}"
    return ""


def _judge(entry: OpEntry, actual: Any, expected: Any, float64: Callable[[], Any] | None) -> Verdict:
    got, want = outputs(_host(actual)), outputs(expected)
    if kind := entry.nondeterministic:
        return statistics(got, want, kind)
    return compare(got, want, None if float64 is None else lambda: outputs(float64()))


def _run_forward(entry: OpEntry, sample: Any, target: Target, device_op: Callable[..., Any] | None = None,
                 layout: Callable[[Any], Any] = lambda x: x) -> Verdict:
    """The device runs `device_op` (default: the op itself); the CPU and float64 run the op eagerly.
    `layout` reshapes the inputs' memory (same values) on both sides."""
    call = entry.op
    args, kwargs = _args(sample)
    expected = _cpu(target, lambda: call(*layout(_detach(args)), **_detach(kwargs)))
    dev_args, dev_kwargs = _device(lambda: _on_device(entry, args, kwargs, target))
    dev_args = _device(lambda: layout(dev_args))
    actual = _device(lambda: (device_op or call)(*dev_args, **dev_kwargs))
    if misplaced := _check_devices(actual, target):
        return Verdict(False, misplaced)

    def float64() -> Any:
        with target.reference():
            return call(*_widen(args), **_widen(kwargs))
    return _judge(entry, actual, expected, float64)


def eager(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    return _run_forward(entry, sample, target)


def noncontiguous(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """Inputs made non-contiguous (same values, gaps in memory) on the device and on the CPU alike:
    a kernel that rejects such inputs on the CPU too is skipped, not failed."""
    from torch.testing._internal.common_utils import noncontiguous_like

    def spread(x: Any) -> Any:
        return tree_map(lambda t: noncontiguous_like(t) if isinstance(t, torch.Tensor) and t.numel() > 1 else t, x)
    args, _ = _args(sample)
    if not any(isinstance(t, torch.Tensor) and t.numel() > 1 for t in outputs(args)):
        raise Skip("no input with more than one element to make non-contiguous")
    return _run_forward(entry, sample, target, layout=spread)


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
    args, kwargs = _args(sample)
    expected = _cpu(target, lambda: _gradients(entry, sample, _detach(args, True), _detach(kwargs, True)))
    dev_args, dev_kwargs = _device(lambda: _on_device(entry, args, kwargs, target, grad=True))
    actual = _device(lambda: _gradients(entry, sample, dev_args, dev_kwargs))
    if misplaced := _check_devices(actual, target):
        return Verdict(False, "gradient " + misplaced)

    def float64() -> list[Any]:
        with target.reference():
            return outputs(_gradients(entry, sample, _widen(args, True), _widen(kwargs, True)))
    return compare(outputs(_host(actual)), outputs(expected), float64)


def out(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    if not entry.supports_out:
        raise Unsupported(f"{entry.name} has no out= variant")
    args, kwargs = _args(sample)
    expected = _cpu(target, lambda: entry.op(*_detach(args), **_detach(kwargs)))
    leaves = outputs(expected)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise Skip("the op's result is not only tensors")

    def buffers(device: torch.device) -> Any:
        made = [torch.empty_like(t, device=device) for t in leaves]
        return made[0] if isinstance(expected, torch.Tensor) else tuple(made)

    cpu_returned = _cpu(target, lambda: entry.op(*_detach(args), **_detach(kwargs), out=buffers(torch.device("cpu"))))
    dev_args, dev_kwargs = _device(lambda: _on_device(entry, args, kwargs, target))
    out_buffers = _device(lambda: buffers(target.device))
    returned = _device(lambda: entry.op(*dev_args, **dev_kwargs, out=out_buffers))
    written = outputs(out_buffers)
    # Ops whose out= form returns nothing on the CPU (split_with_sizes_copy, ...) may return nothing here.
    if cpu_returned is not None and not all(r is w for r, w in zip(outputs(returned), written)):
        return Verdict(False, "the op did not return the out= tensors it was given")
    verdict = _judge(entry, written, leaves, None)
    if (verdict.ok and target.device.type != "cpu" and _has_tensor(args) and "device" not in kwargs
            and not entry.out_copies):
        wrong = buffers(torch.device("cpu"))
        try:
            entry.op(*dev_args, **dev_kwargs, out=wrong)
        except Exception:
            pass  # refused, as it must be
        else:
            inputs = ", ".join(str(tuple(t.shape)) for t in outputs(dev_args) if isinstance(t, torch.Tensor))
            shapes = ", ".join(str(tuple(t.shape)) for t in outputs(wrong))
            return Verdict(False, f"accepted an out= tensor on the cpu [{shapes}] for inputs on {target.device} [{inputs}]")
    return verdict


@contextlib.contextmanager
def _fresh_dynamo() -> Iterator[None]:
    import torch._dynamo

    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def compile(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    if target.compile_reason is not None:
        raise Unsupported(target.compile_reason)
    compiled = torch.compile(lambda *a, **k: entry.op(*a, **k), backend="inductor", dynamic=False)
    with _fresh_dynamo():
        return _run_forward(entry, sample, target, device_op=compiled)


RUNNERS: dict[str, Callable[[OpEntry, Any, Target], Verdict]] = {
    "eager": eager, "autograd": autograd, "out": out, "noncontiguous": noncontiguous, "compile": compile,
}
