"""The runtime bound to PrivateUse1 in this process: bound on first device use, once."""

import threading
from types import ModuleType
from collections.abc import Callable
from typing import Any

import torch

_lock = threading.Lock()
_ext: ModuleType | None = None
_failure: BaseException | None = None
_on_bind: list[Callable[[ModuleType], None]] = []  # calls waiting for the bind (when_bound)


def extension(backend: Any) -> ModuleType:
    """The binding's C++ module with `backend`'s runtime bound (builds and binds on first call)."""
    global _ext, _failure
    if _ext is not None:
        return _ext
    with _lock:
        if _ext is not None:
            return _ext
        if _failure is not None:  # a failed bind is not retried in the same process
            raise _failure
        try:
            ext = _bind(backend)
        except Exception as err:
            _failure = err
            raise
        while _on_bind:
            _on_bind.pop(0)(ext)
        _ext = ext
        return _ext


def when_bound(call: Callable[[ModuleType], None]) -> None:
    """`call(ext)` now if the runtime is bound, else right after the bind, before any other use: what
    torch.cuda queues until CUDA initialises (a seed), without making the device initialise."""
    with _lock:
        if _ext is None:
            _on_bind.append(call)
            return
    call(_ext)


def is_bound() -> bool:
    return _ext is not None


def bound_extension() -> ModuleType:
    """The binding's C++ module, once a runtime is bound (a device tensor exists only then)."""
    if _ext is None:
        raise RuntimeError("torchplug: no device runtime is bound to PrivateUse1 yet; the device binds on first use")
    return _ext


# Ops the fallback runs whole although torch has a composite kernel for any device: the composite
# hands the structured out= variant a 0-dim result, which the CPU kernel the fallback then runs
# resizes through the loss's elementwise shape, with torch's deprecation warning on every call.
WHOLE_OP_FALLBACKS = ("aten::mse_loss", "aten::smooth_l1_loss")


def _bind(backend: Any) -> ModuleType:
    from ..dispatcher import enable_fallback, set_fallback_policy
    from .build import load

    runtime = backend.runtime()  # loads the library and checks its version (DeviceRuntimeError names the fix)
    ext = load()
    ext.bind(runtime.address, backend.spec.name)
    names = {dtype: str(dtype) for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}
    ext.declare_dtypes(sorted(backend.spec.dtypes, key=str), names, backend.spec.device_type)
    for op in backend.host_kernels():
        ext.register_launch_kernel(op)
    # Every op without a kernel of the device's own runs on the CPU through torchplug's governed
    # fallback, which stages its inputs and results through the runtime's copies (csrc/kernels.cpp).
    set_fallback_policy(backend.spec.name, backend.fallback_policy)
    enable_fallback(backend.spec.name)
    enable_fallback(backend.spec.name, WHOLE_OP_FALLBACKS)
    return ext
