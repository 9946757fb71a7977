"""The kernel registry: backend kernels for ATen and torchplug ops, routed by dispatch key and dtype.

A registration is validated at once (the op exists, the kernel fits its schema, the backend
supports the dtypes) and then installed in torch's own dispatcher through the C++ dtype split
(csrc/dtype_split.cpp). A call therefore never enters Python to be routed: the dtype picks the
highest-priority registered kernel, and every other dtype keeps the kernel torch had there.
"""

import difflib
import inspect
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from .. import warn
from ..entrypoints import Backend, loaded_backend
from .native import extension
from .result_check import checked

KernelT = TypeVar("KernelT", bound=Callable[..., Any])


class RegistrationError(ValueError):
    """A kernel that cannot be registered; the message names the op, backend and what to fix."""


@dataclass(frozen=True)
class Registration:
    op: str  # qualified name with overload, e.g. "aten::add.Tensor"
    backend: str
    kernel: Callable[..., Any] | torch._ops.OpOverload
    dtypes: frozenset[torch.dtype]
    priority: int
    plugin: str  # who registered it: the kernel's top-level package or op namespace
    kernel_op: str  # the op whose kernel the dtype split calls
    label: str = ""  # how traces name it, e.g. "torchplug_cuda triton kernel"; default "<plugin> kernel"


_lock = threading.RLock()
_registrations: dict[tuple[str, str], list[Registration]] = {}
_kernel_library: torch.library.Library | None = None
# Private op names are never reused: torch keeps a defined op after its registration is withdrawn.
_kernel_numbers = itertools.count()


def ready_backend(name: str) -> Backend:
    """The loaded backend `name`, with its emulated runtime started if it is emulated.

    Kernels installed at a dispatch key capture or override what is there, so an emulated
    runtime's own kernels must be registered first.
    """
    found = loaded_backend(name)
    if found.status().mode == "emulated":
        from ..emulation import ensure

        ensure()
    return found


def qualified_name(op: str | torch._ops.OpOverload) -> str:
    if isinstance(op, torch._ops.OpOverload):
        name, overload = op._schema.name, op._schema.overload_name
        return f"{name}.{overload}" if overload else name
    return op


def resolve_schema(op: str) -> torch._C.FunctionSchema:
    """The schema of `op` ("aten::gelu", "aten::add.Tensor", "torchplug::rms_norm")."""
    name, _, overload = op.partition(".")
    if "::" not in name:
        raise RegistrationError(f"op {op!r} must be qualified with its namespace, e.g. 'aten::{op}'")
    if name.startswith("torchplug::"):
        from . import ops  # noqa: F401  -- defines the torchplug:: schemas
    try:
        return torch._C._get_schema(name, overload)
    except RuntimeError:
        close = difflib.get_close_matches(op, torch._C._dispatch_get_all_op_names(), n=3, cutoff=0.75)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise RegistrationError(f"unknown op {op!r}: torch has no operator of that name.{hint}") from None


def _check_signature(op: str, schema: torch._C.FunctionSchema, kernel: Callable[..., Any]) -> None:
    """The kernel must accept the schema's arguments as torch passes them."""
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    keywords = [a.name for a in schema.arguments if a.kwarg_only]
    try:
        inspect.signature(kernel).bind(*positional, **dict.fromkeys(keywords))
    except TypeError as err:
        raise RegistrationError(
            f"kernel {kernel.__qualname__}{inspect.signature(kernel)} does not fit {schema}: {err}. "
            f"It is called with {len(positional)} positional argument(s) ({', '.join(positional)})"
            + (f" and keyword argument(s) {', '.join(keywords)}" if keywords else "")
        ) from None
    except ValueError:  # builtins without a signature: nothing to check
        pass


def _check_kernel_op(op: str, schema: torch._C.FunctionSchema, kernel: torch._ops.OpOverload) -> None:
    if qualified_name(kernel) == op:  # its kernel at this key is about to be the split itself
        raise RegistrationError(f"{op} cannot be registered as its own kernel: pass a different op")
    theirs = [str(a.type) for a in kernel._schema.arguments]
    ours = [str(a.type) for a in schema.arguments]
    if theirs != ours:
        raise RegistrationError(f"C++ kernel op {kernel._schema} does not take the arguments of {schema}")


def _plugin_of(kernel: Callable[..., Any] | torch._ops.OpOverload) -> str:
    if isinstance(kernel, torch._ops.OpOverload):
        return kernel.namespace
    return (getattr(kernel, "__module__", None) or "?").split(".")[0]


def _define_python_kernel(op: str, schema: torch._C.FunctionSchema, backend: str, kernel: Callable[..., Any]) -> str:
    """A private op with `op`'s schema whose kernel is `kernel`, so C++ can call it boxed."""
    global _kernel_library
    if _kernel_library is None:
        _kernel_library = torch.library.Library("torchplug_kernels", "FRAGMENT")
    name = f"{backend}__{op.replace('::', '__').replace('.', '__')}__{next(_kernel_numbers)}"
    signature = str(schema)
    _kernel_library.define(name + signature[signature.index("("):])
    _kernel_library.impl(name, kernel, "CompositeExplicitAutograd")
    return f"torchplug_kernels::{name}"


def register(op: str | torch._ops.OpOverload, backend: str, kernel: Callable[..., Any] | torch._ops.OpOverload,
             dtypes: Iterable[torch.dtype] | None = None, priority: int = 0, *, label: str = "") -> Registration:
    """Register `kernel` for `op` on `backend`'s device, for `dtypes` (default: all it supports).

    `kernel` is a Python callable taking the op's arguments, or the OpOverload of a C++ kernel
    registered by a torch extension with the same argument types. `label` names it in traces.
    A Python kernel's results are checked against the schema on every call (result_check.py); a
    C++ kernel runs unchecked.
    """
    op = qualified_name(op)
    schema = resolve_schema(op)
    spec = ready_backend(backend).spec
    wanted = frozenset(spec.dtypes if dtypes is None else dtypes)
    if not wanted:
        raise RegistrationError(f"kernel for {op} on {backend}: dtypes is empty")
    if unsupported := wanted - spec.dtypes:
        raise RegistrationError(
            f"kernel for {op} on {backend}: {backend} does not support "
            f"{', '.join(sorted(str(d) for d in unsupported))} (its BackendSpec.dtypes)"
        )
    if isinstance(kernel, torch._ops.OpOverload):
        _check_kernel_op(op, schema, kernel)
    elif callable(kernel):
        _check_signature(op, schema, kernel)
    else:
        raise RegistrationError(f"kernel for {op} on {backend} must be callable or an OpOverload, got {kernel!r}")
    with _lock:
        kernel_op = (qualified_name(kernel) if isinstance(kernel, torch._ops.OpOverload)
                     else _define_python_kernel(op, schema, backend,
                                                checked(kernel, op, schema, backend, spec.device_type)))
        plugin = _plugin_of(kernel)
        registration = Registration(op, backend, kernel, wanted, priority, plugin, kernel_op,
                                    label or f"{plugin} kernel")
        existing = _registrations.setdefault((op, backend), [])
        for other in existing:
            if other.priority == priority and other.dtypes & wanted and other.plugin != registration.plugin:
                first, second = sorted((other.plugin, registration.plugin))
                warn(f"{other.plugin} and {registration.plugin} both register {op} on {backend} at priority "
                     f"{priority}; {first} wins (equal priorities are ordered by plugin name). Give one a "
                     "higher priority to choose.")
        existing.append(registration)
        _install(op, backend, spec.dispatch_key, wanted)
    return registration


def unregister(registration: Registration) -> None:
    """Withdraw a registration: its dtypes go to the next registered kernel, or back to torch's."""
    with _lock:
        existing = _registrations.get((registration.op, registration.backend), [])
        if registration not in existing:
            raise RegistrationError(f"{registration.op} on {registration.backend} has no such registration "
                                    f"(from {registration.plugin}); was it unregistered already?")
        existing.remove(registration)
        spec = loaded_backend(registration.backend).spec
        _install(registration.op, registration.backend, spec.dispatch_key, registration.dtypes)


def kernel(op: str | torch._ops.OpOverload, *, backend: str, dtypes: Iterable[torch.dtype] | None = None,
           priority: int = 0) -> Callable[[KernelT], KernelT]:
    """Decorator form of `register`."""
    def decorate(fn: KernelT) -> KernelT:
        register(op, backend, fn, dtypes, priority)
        return fn
    return decorate


def winner(op: str, backend: str, dtype: torch.dtype) -> Registration | None:
    """The registration that serves `op` on `backend` for `dtype`, if any."""
    candidates = [r for r in _registrations.get((op, backend), ()) if dtype in r.dtypes]
    # Highest priority first; equal priorities are ordered by plugin name, then first registered.
    return min(candidates, key=lambda r: (-r.priority, r.plugin), default=None)


def registrations(backend: str | None = None) -> list[Registration]:
    with _lock:
        return [r for (_, b), regs in _registrations.items() if backend in (None, b) for r in regs]


def _install(op: str, backend: str, dispatch_key: str, dtypes: frozenset[torch.dtype]) -> None:
    by_kernel: dict[str, list[torch.dtype]] = {}
    for dtype in dtypes:
        chosen = winner(op, backend, dtype)
        by_kernel.setdefault(chosen.kernel_op if chosen else "", []).append(dtype)  # "": torch's kernel
    for kernel_op, kernel_dtypes in by_kernel.items():
        extension().route(op, dispatch_key, kernel_dtypes, kernel_op)
