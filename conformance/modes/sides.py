"""The two sides of a case: the sample run on the CPU (the reference) and on the device under test.

Shared by every mode (modes/*.py). An exception on the device side is the
device's failure; one on the CPU side means the sample itself is not runnable, and the case is
skipped.
"""

import re
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import outputs

# The emulated runtime (and well-behaved plugins) refuse dtypes a device lacks with this wording.
_DTYPE_REFUSAL = re.compile(r"does not support (torch\.\w+)")


class Skip(Exception):
    """The case cannot say anything about the device (the CPU rejects the sample, ...)."""


class Unsupported(Exception):
    """The device refuses the case's dtype, or the mode cannot run on this backend."""


def detach(x: Any, grad: bool = False) -> Any:
    """Fresh copies of the tensors in `x` (requiring grad where `grad` and the original do)."""
    def leaf(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        return t.detach().clone().requires_grad_(grad and t.requires_grad)
    return tree_map(leaf, x)


def _to(x: Any, device: torch.device, grad: bool = False) -> Any:
    def leaf(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            return t  # samples are made on the CPU: a tensor elsewhere (meta) is there on purpose (error inputs)
        # Always a copy: on the CPU backend .to() would hand back the sample itself (in-place ops would
        # change it, and views would keep the sample's storage offset where the reference has none).
        return t.detach().to(device, copy=True).requires_grad_(grad and t.requires_grad)
    return tree_map(leaf, x)


def _is_cpu_device(x: Any) -> bool:
    return (isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and x == "cpu")


def on_device(entry: OpEntry, args: list[Any], kwargs: dict[str, Any], target: Target,
              grad: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """The sample's arguments for the device run: tensors moved (except those the op reads on the
    host), and a CPU named as the result's device (factory samples, `to`) replaced by the device."""
    moved = [a if i in entry.host_args else _to(a, target.device, grad) for i, a in enumerate(args)]
    moved = [target.device if _is_cpu_device(a) else a for a in moved]
    kwargs = _to(kwargs, target.device, grad)
    if "device" in kwargs:
        kwargs["device"] = target.device
    return moved, kwargs


def host(x: Any) -> Any:
    return tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, x)


def widen(x: Any, grad: bool = False) -> Any:
    """Floating and complex tensors in double precision (for the float64 reference)."""
    def leaf(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and (t.is_complex() or t.is_floating_point()):
            wide = t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
            return wide.requires_grad_(grad and t.requires_grad)
        return detach(t, grad)
    return tree_map(leaf, x)


def sample_args(sample: Any) -> tuple[list[Any], dict[str, Any]]:
    return [sample.input, *sample.args], dict(sample.kwargs)


def has_tensor(x: Any) -> bool:
    return any(isinstance(t, torch.Tensor) for t in outputs(x))


def on_cpu(target: Target, fn: Callable[[], Any]) -> Any:
    """`fn()` as the reference; the CPU rejecting it makes the case a skip."""
    try:
        with target.reference():
            return fn()
    except Exception as err:
        raise Skip(f"the CPU rejects this sample: {type(err).__name__}: {first_line(err)}") from err


def on_target(fn: Callable[[], Any]) -> Any:
    """`fn()` on the device; a refused dtype makes the case unsupported, any other error propagates."""
    try:
        return fn()
    except Exception as err:
        if refused := _DTYPE_REFUSAL.search(str(err)):
            raise Unsupported(f"the device refuses {refused.group(1)}: {first_line(err)}") from err
        raise


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def misplaced(result: Any, target: Target) -> str:
    """Why a device result is not (only) on the device, or ''."""
    for i, t in enumerate(outputs(result)):
        if isinstance(t, torch.Tensor) and t.device.type != target.device.type:
            return f"output {i} is on {t.device}, expected {target.device.type}"
    return ""
