"""Fidelity mode: Inductor's GPU (Triton) codegen for emulated cuda, rocm and xpu, run by Triton's interpreter.

Opt-in with TORCHPLUG_EMULATE_INDUCTOR=triton. Inductor generates the same Triton kernels it would
for the real GPU, so a GPU backend's codegen is exercised on a machine without one. The kernels
run under Triton's interpreter (numpy, one program at a time): thousands of times slower than the
host target, so this mode is for small tests.

Inductor asks Triton's active driver for the GPU target (cache keys, kernel launchers); on a
machine without a GPU no driver is active, so a stand-in driver claims the emulated device's.
"""

import difflib
import os
from collections.abc import Hashable
from typing import Any

import torch

from .. import warn
from ..entrypoints import TritonArch, loaded_backend
from ..entrypoints.extensions import call
from ..entrypoints.torch_devices import torch_device_type
from .host_memory import HostMemoryTarget

VERSION = 1
MODE_VARIABLE = "TORCHPLUG_EMULATE_INDUCTOR"
MODES = ("triton",)  # unset: the host target


def check_mode_setting() -> None:
    """At ``import torch``: a value that is no mode would leave compiled graphs on the host target without a word."""
    value = os.environ.get(MODE_VARIABLE, "")
    if value and value not in MODES:
        close = difflib.get_close_matches(value.strip().lower(), MODES, n=1)
        warn(f"{MODE_VARIABLE}={value!r} is not a compile mode{f' (did you mean {close[0]!r}?)' if close else ''}, "
             "so torch.compile on emulated devices keeps the host C++ target. Set "
             f"{MODE_VARIABLE}=triton (Triton's interpreter on emulated cuda, rocm and xpu; Metal source on emulated "
             "mps), or unset it.")


def requested(backend: Any) -> TritonArch | None:
    """What the stand-in driver claims for `backend` when TORCHPLUG_EMULATE_INDUCTOR=triton asks for
    this mode and its profile names a Triton architecture (BackendSpec.profile.fidelity), else None."""
    return backend.spec.profile.fidelity if os.environ.get(MODE_VARIABLE) == "triton" else None


def requested_for_metal(device_type: str) -> bool:
    """The same setting on emulated mps: Inductor's Metal codegen, its source kept (metal.py)."""
    known = torch_device_type(device_type)
    return os.environ.get(MODE_VARIABLE) == "triton" and known is not None and known.inductor == "metal"


def interpret_if_requested(backend: Any) -> None:
    """At autoload, for an emulated backend: turn Triton's interpreter on if this mode is asked for.

    Triton decides between interpreter and compiler when a kernel is defined, and Inductor's
    helper kernels are defined when Inductor is imported, so this cannot wait for the first compile.
    """
    interpreter = call("triton_interpreter", backend)
    if requested(backend) and interpreter is not None and interpreter.unavailable_reason() is None:
        interpreter.enable()


class TritonInterpreterTarget(HostMemoryTarget):
    name = "triton-interpreter (emulated; slow, for small tests)"

    def __init__(self, backend_name: str, device_type: str, arch: TritonArch) -> None:
        super().__init__(device_type)
        self.backend_name, self.arch = backend_name, arch

    def _interpreter(self) -> Any:
        """How the emulated device runs Triton kernels (asked through the extension point, never imported)."""
        interpreter = call("triton_interpreter", loaded_backend(self.backend_name))
        if interpreter is None:
            raise RuntimeError(f"no loaded extension runs Triton kernels interpreted on {self.backend_name!r}")
        return interpreter

    def unavailable_reason(self) -> str | None:
        reason = self._interpreter().unavailable_reason()
        return f"{MODE_VARIABLE}=triton needs Triton: {reason}" if reason else super().unavailable_reason()

    def uuid(self) -> Hashable:
        from .wrapper import source_digest

        return ("torchplug-triton-interpreter", VERSION, self.backend_name, self.arch, source_digest())

    def prepare(self, module: Any) -> tuple[Any, Any, Any]:
        from torch._inductor.codegen.triton import TritonScheduling

        from .device_interface import register_interface
        from .patches import add_interpreted_device
        from .wrapper import interpreted_wrapper

        interpreter = self._interpreter()
        interpreter.enable()
        interpreter.install_libdevice()
        arch = self.arch.arch
        add_interpreted_device(self.device_type, _stand_in_driver(module, self.arch.backend, arch, self.arch.warp_size))
        register_interface(module, self.refused_dtypes(), triton_capable=True,
                           capability=arch if isinstance(arch, int) else None)
        return TritonScheduling, interpreted_wrapper(self.launcher()), None


def _stand_in_driver(module: Any, backend: str, arch: int | str, warp_size: int) -> Any:
    """A Triton driver for the emulated device: it reports the GPU target; kernels are interpreted."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class InterpreterDriver(DriverBase):
        @classmethod
        def is_active(cls) -> bool:
            return False  # never chosen by Triton itself: torchplug sets it for the emulated device

        def map_python_to_cpp_type(self, ty: str) -> str:
            raise RuntimeError("Triton's interpreter launches kernels from Python: there is no C++ launcher")

        def get_current_target(self) -> GPUTarget:
            return GPUTarget(backend, arch, warp_size)

        def get_active_torch_device(self) -> torch.device:
            return torch.device(module.type, module.current_device())

        def get_device_interface(self) -> Any:
            return getattr(torch, module.type)

        def get_current_device(self) -> int:
            return module.current_device()

        def set_current_device(self, index: int) -> None:
            module.set_device(index)

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_benchmarker(self) -> Any:
            from triton.testing import do_bench

            return do_bench

    return InterpreterDriver()
