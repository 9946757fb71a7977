"""Triton's interpreter: how Triton kernels run on emulated (host-memory) devices.

Emulated devices hold host memory, so a Triton kernel can run on them only under Triton's
interpreter, which executes each program instance with numpy. Eager kernels (torchplug_cuda,
_rocm, _xpu) and Inductor's fidelity mode both ask this one module, so they always agree.
"""

import importlib.util
import os


def unavailable_reason() -> str | None:
    """None when the interpreter can run here, else why not (with the fix)."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed (pip install triton, or the 'test' extra)"
    return None


def requested() -> bool:
    """The user asked for Triton under the interpreter: TRITON_INTERPRET=1, or Inductor's
    fidelity mode (TORCHPLUG_EMULATE_INDUCTOR=triton), which generates Triton for emulated GPUs."""
    return os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("TORCHPLUG_EMULATE_INDUCTOR") == "triton"


def active() -> bool:
    return requested() and unavailable_reason() is None


def enable() -> None:
    """Turn the interpreter on for this process (idempotent).

    `triton.jit` picks interpreter or compiler when a kernel is decorated, so this must run
    before the modules that define Triton kernels are imported.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"cannot run Triton kernels on an emulated device: {reason}")
    os.environ["TRITON_INTERPRET"] = "1"
    from triton import knobs

    knobs.runtime.interpret = True
