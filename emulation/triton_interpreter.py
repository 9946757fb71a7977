"""Triton's interpreter: how Triton kernels run on emulated (host-memory) devices.

Emulated devices hold host memory, so a Triton kernel can run on them only under Triton's
interpreter, which executes each program instance with numpy. Eager kernels (torchplug_cuda,
_rocm, _xpu) and Inductor's fidelity mode both ask this one module, so they always agree.
"""

import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_libdevice_installed = False


def unavailable_reason() -> str | None:
    """None when the interpreter can run here, else why not (with the fix)."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed (pip install triton, or the 'test' extra)"
    return None


def requested() -> bool:
    """The user asked for Triton under the interpreter: TRITON_INTERPRET=1, or Inductor's
    fidelity mode (TORCHPLUG_EMULATE_INDUCTOR=triton), which generates Triton for emulated GPUs."""
    return os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("TORCHPLUG_EMULATE_INDUCTOR") == "triton"


def enable() -> None:
    """Turn the interpreter on for this process (idempotent).

    `triton.jit` picks interpreter or compiler when a kernel is decorated, so this must run
    before the modules that define Triton kernels are imported.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"cannot run Triton kernels on an emulated device: {reason}")
    os.environ["TRITON_INTERPRET"] = "1"  # Triton reads it when asked, so this is enough before import
    knobs = sys.modules.get("triton.knobs")
    if knobs is not None:  # already imported: a value set in code would win over the variable
        knobs.runtime.interpret = True


def _libdevice_functions() -> dict[str, Callable[..., Any]]:
    """libdevice's functions, by name, as torch functions on CPU tensors (float32/float64)."""
    import torch

    same_name = (
        "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "copysign", "cos", "cosh", "erf",
        "erfc", "exp", "exp2", "expm1", "floor", "fmod", "hypot", "isinf", "isnan", "ldexp", "lgamma", "log",
        "log10", "log1p", "log2", "nextafter", "pow", "rsqrt", "signbit", "sin", "sinh", "sqrt", "tan", "tanh",
        "trunc",
    )
    functions: dict[str, Callable[..., Any]] = {name: getattr(torch, name) for name in same_name}
    functions.update(
        abs=torch.abs, fast_tanhf=torch.tanh, nearbyint=torch.round, rint=torch.round,  # round half to even
        erfinv=torch.special.erfinv, llrint=lambda x: torch.round(x).to(torch.int64),
        ilogb=lambda x: (torch.frexp(x).exponent - 1).to(torch.int32), div_rn=torch.div, fmin=torch.fmin,
        fmax=torch.fmax,
    )
    return functions


def install_libdevice() -> None:
    """Give triton.language.extra.libdevice bodies the interpreter can run (idempotent).

    Its functions are declarations that a GPU compiler binds to the vendor's math library; the
    interpreter cannot call extern code, so a kernel calling e.g. libdevice.tanh would fail there.
    Each stand-in computes the same function with torch, on the interpreter's numpy arrays.
    """
    global _libdevice_installed
    with _lock:
        if _libdevice_installed:
            return
        from triton.language.extra import libdevice

        for name, function in _libdevice_functions().items():
            setattr(libdevice, name, _elementwise(name, function))
        _libdevice_installed = True


def _elementwise(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    import numpy as np
    import torch
    from triton import language as tl
    from triton.runtime.interpreter import TensorHandle

    to_tl = {np.dtype(bool): tl.int1, np.dtype(np.int32): tl.int32, np.dtype(np.int64): tl.int64,
             np.dtype(np.float16): tl.float16, np.dtype(np.float32): tl.float32, np.dtype(np.float64): tl.float64}

    def stand_in(*args: Any, **_: Any) -> Any:
        like = next(a for a in args if isinstance(a, tl.core.tensor))
        values = [torch.from_numpy(np.asarray(a.handle.data)) if isinstance(a, tl.core.tensor) else a for a in args]
        result = np.ascontiguousarray(function(*values).numpy())
        dtype = to_tl[result.dtype]
        block = tl.block_type(dtype, like.type.shape) if like.type.is_block() else dtype
        return tl.core.tensor(TensorHandle(result, dtype), block)

    stand_in.__name__ = name
    return stand_in
