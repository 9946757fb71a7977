"""The result check wrapped around every Python backend kernel: it must return what the op's schema promises.

A kernel that returns the wrong thing (None from a stub, a CPU tensor, a fresh tensor from an
out= overload) would otherwise flow on silently into the caller's model. What is checked is
worked out once per registration from the schema, so a call pays for a few attribute reads:
  * the number of results (and that each Tensor result is a tensor);
  * the device type of each tensor result;
  * its dtype where the call fixes it (a `dtype=` argument) for the first tensor result;
  * for in-place and out= overloads, that the result is the very tensor passed in.
C++ kernels are not wrapped: they run without Python and keep their cost.
"""

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


class KernelResultError(RuntimeError):
    """A backend kernel returned something its op's schema does not allow; names kernel, op and what."""


@dataclass(frozen=True)
class _Return:
    kind: str  # "tensor", "optional" (Tensor?), "list" (Tensor[]) or "other" (not checked)
    written: tuple[int, str] | None  # (position, name) of the argument a mutable return must be


def _kind(type_: torch._C.Type) -> str:
    text = str(type_)
    return {"Tensor": "tensor", "Optional[Tensor]": "optional", "List[Tensor]": "list"}.get(text, "other")


def _written_argument(schema: torch._C.FunctionSchema, ret: torch._C.Argument) -> tuple[int, str] | None:
    if ret.alias_info is None or not ret.alias_info.is_write:
        return None
    for position, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.before_set == ret.alias_info.before_set:
            return position, arg.name
    return None


def _dtype_argument(schema: torch._C.FunctionSchema) -> tuple[int, str] | None:
    for position, arg in enumerate(schema.arguments):
        if arg.name == "dtype" and "ScalarType" in str(arg.real_type):
            return position, arg.name
    return None


def _what(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], where: tuple[int, str]) -> Any:
    # torch passes kwarg-only arguments by name and may leave out trailing defaults.
    position, name = where
    return args[position] if position < len(args) else kwargs.get(name)


def _on_device_type(device_type: str) -> Callable[[Tensor], bool]:
    # Tensor.is_xpu and friends (torch generates is_<name> for a renamed PrivateUse1 device) cost
    # ~0.1 us; tensor.device.type costs ~0.7 us.
    if hasattr(Tensor, f"is_{device_type}"):
        return operator.attrgetter(f"is_{device_type}")
    return lambda t: t.device.type == device_type


def checked(kernel: Callable[..., Any], op: str, schema: torch._C.FunctionSchema, backend: str,
            device_type: str) -> Callable[..., Any]:
    """`kernel`, raising KernelResultError when a call's result breaks `schema`'s promise."""
    returns = tuple(_Return(_kind(r.type), _written_argument(schema, r)) for r in schema.returns)
    dtype_at = _dtype_argument(schema)
    first_tensor = next((i for i, r in enumerate(returns) if r.kind == "tensor"), None)
    on_device = _on_device_type(device_type)
    promised = str(schema).rsplit(" -> ", 1)[1]
    name = getattr(kernel, "__qualname__", repr(kernel))

    def fail(problem: str) -> KernelResultError:
        return KernelResultError(
            f"{name}, the {backend} kernel for {op}, {problem}; {op} returns {promised}. Fix the kernel "
            "so that it returns what the op's schema promises (docs/dispatcher.md, 'Kernel contract').")

    def check_tensor(value: Any, index: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not isinstance(value, Tensor):
            raise fail(f"returned {_what(value)} as result {index}, not a Tensor")
        written = returns[index].written
        if written is not None:
            if value is not _argument(args, kwargs, written):
                raise fail(f"returned a new tensor as result {index}, not the argument '{written[1]}' it writes "
                           "to (in-place and out= kernels return the tensor they were given)")
        elif not on_device(value):
            raise fail(f"returned a tensor on {value.device} as result {index}, not on the {device_type} device")
        if index == first_tensor and dtype_at is not None:
            dtype = _argument(args, kwargs, dtype_at)
            if dtype is not None and value.dtype != dtype:
                raise fail(f"returned {value.dtype} as result {index}, but the call asked for dtype={dtype}")

    def check_list(value: Any, index: int) -> None:
        if not isinstance(value, (tuple, list)):
            raise fail(f"returned {_what(value)} as result {index}, not a list of tensors")
        for item in value:
            if not isinstance(item, Tensor) or not on_device(item):
                where = item.device if isinstance(item, Tensor) else _what(item)
                raise fail(f"returned {where} in the list of result {index}, not a {device_type} tensor")

    def check(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not returns:
            if result is not None:
                raise fail(f"returned {_what(result)}, not None")
            return
        values = (result,) if len(returns) == 1 else result
        if len(returns) > 1 and (not isinstance(values, (tuple, list)) or len(values) != len(returns)):
            got = f"{len(values)} values" if isinstance(values, (tuple, list)) else _what(values)
            raise fail(f"returned {got}, not a tuple of {len(returns)}")
        for index, (value, spec) in enumerate(zip(values, returns)):
            if spec.kind == "tensor" or (spec.kind == "optional" and value is not None):
                check_tensor(value, index, args, kwargs)
            elif spec.kind == "list":
                check_list(value, index)

    if len(returns) == 1 and returns[0] == _Return("tensor", None) and dtype_at is None:
        # Most ops return one fresh tensor: checked inline, the full check only builds the message.
        @functools.wraps(kernel)
        def run_one(*args: Any, **kwargs: Any) -> Any:
            result = kernel(*args, **kwargs)
            if not (isinstance(result, Tensor) and on_device(result)):
                check(result, args, kwargs)
            return result
        return run_one

    @functools.wraps(kernel)
    def run(*args: Any, **kwargs: Any) -> Any:
        result = kernel(*args, **kwargs)
        check(result, args, kwargs)
        return result
    return run
