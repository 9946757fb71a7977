"""The kernel registry: backend kernels for ATen and torchplug ops, routed by dispatch key and dtype.

A registration is validated at once (the op exists, the kernel fits its schema, the backend
supports the dtypes) and recorded; it is installed in torch's own dispatcher through the C++ dtype
split (csrc/dtype_split.cpp) when the backend's device is first used. A call therefore never enters
Python to be routed: the dtype picks the highest-priority registered kernel, and every other dtype
keeps the kernel torch had there.

Until then nothing is compiled, so a plugin may register kernels in its `setup()`, inside ``import
torch``: each registered op gets a placeholder kernel at the device's dispatch key (a Python kernel,
registered in microseconds) whose first call starts the backend's kernels (the device's runtime,
the dtype split, every waiting registration) and calls the op again. The kernels of a device that is
unavailable here wait, recorded, and are never installed.
"""

import difflib
import inspect
import itertools
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from .. import warn
from ..entrypoints import Backend, loaded_backend
from ..entrypoints.extensions import call
from .cpp import NAME, extension
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
_started: set[str] = set()  # backends whose registrations are installed: later ones install at once
_placeholders: dict[tuple[str, str], torch.library.Library] = {}  # (op, backend) -> its first-call placeholder


def ready_backend(name: str) -> Backend:
    """The loaded backend `name`, with the runtime under its device started (the extension point `ready`).

    Kernels installed at a dispatch key capture or override what is there, so a runtime's own
    kernels (an emulated device's) must be registered first.
    """
    found = loaded_backend(name)
    call("ready", found)
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
    found = loaded_backend(backend)
    spec = found.spec
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
        if backend in _started:
            _install(op, backend, spec.dispatch_key, wanted)
        elif found.status().mode == "unavailable":
            pass  # its kernels wait: nothing is installed for a device that is not here
        elif sys.modules.get(NAME) is not None and call("device_mode", found) is None:
            start(backend)  # the dtype split is loaded already (e.g. from the cache) and no runtime waits
        else:
            _place_holder(op, backend, spec.dispatch_key)
    return registration


def start(backend: str) -> None:
    """Install `backend`'s waiting registrations now (on its device's first use): its runtime, then the
    dtype split (built on first use), then every registered op. Idempotent."""
    with _lock:
        if backend in _started:
            return
        spec = ready_backend(backend).spec
        extension()  # builds the dtype split if needed, before anything is changed
        for (op, name), regs in list(_registrations.items()):
            if name != backend:
                continue
            placeholder = _placeholders.pop((op, name), None)
            if placeholder is not None:
                placeholder._destroy()  # before the split captures what torch has at the key
            if regs:
                _install(op, backend, spec.dispatch_key, frozenset().union(*(r.dtypes for r in regs)))
        _started.add(backend)


def _overload(op: str) -> torch._ops.OpOverload:
    namespace, _, name = op.partition("::")
    base, _, overload = name.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), base), overload or "default")


def _place_holder(op: str, backend: str, dispatch_key: str) -> None:
    """Until `backend` starts, `op` at its key calls this placeholder, which starts it and calls `op` again."""
    if (op, backend) in _placeholders:
        return
    overload = _overload(op)

    def first_call(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        start(backend)
        return overload(*args, **kwargs)

    library = torch.library.Library(op.partition("::")[0], "IMPL")
    with warnings.catch_warnings():  # replacing torch's kernel at the key is the point, for one call
        warnings.simplefilter("ignore")
        library.impl(overload, first_call, dispatch_key, with_keyset=True)
    _placeholders[(op, backend)] = library


def unregister(registration: Registration) -> None:
    """Withdraw a registration: its dtypes go to the next registered kernel, or back to torch's."""
    with _lock:
        existing = _registrations.get((registration.op, registration.backend), [])
        if registration not in existing:
            raise RegistrationError(f"{registration.op} on {registration.backend} has no such registration "
                                    f"(from {registration.plugin}); was it unregistered already?")
        existing.remove(registration)
        if registration.backend in _started:
            spec = loaded_backend(registration.backend).spec
            _install(registration.op, registration.backend, spec.dispatch_key, registration.dtypes)
        elif not existing and (placeholder := _placeholders.pop((registration.op, registration.backend), None)):
            placeholder._destroy()


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
        try:
            extension().route(op, dispatch_key, kernel_dtypes, kernel_op)
        except RuntimeError as err:
            if "no kernel for" not in str(err):
                raise
            raise RegistrationError(
                f"the kernels registered for {op} on {backend} cannot be installed: torch has no kernel of its own "
                f"for {op} at {dispatch_key}, nor a fallback for that key, for the dtype split to leave the other "
                f"dtypes to. Fix: give {backend}'s device a fallback first, e.g. torchplug.dispatcher."
                f"enable_fallback({backend!r}) in its setup() (the governed CPU fallback). ({err})") from None
