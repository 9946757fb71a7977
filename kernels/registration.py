"""Registering a backend's eager kernels for the torchplug ops, under its own key.

A device plugin holds one kernel set (`TritonKernels` for cuda, rocm and xpu; the mps plugin's
`MetalKernels`) and calls `register_when_ops_defined(backend)` from its `setup()`. Nothing heavy
happens inside ``import torch``: the kernels register when torchplug.ops is first imported, and
only where they can run. Where they cannot, `describe()` says why (it reaches `torchplug list`).

Triton kernels run
- on a native device, compiled by Triton for the GPU (triton must be installed), with the launch
  configuration of the backend's profile (BackendSpec.profile.launch);
- on an emulated device, under Triton's interpreter, when it is requested (TRITON_INTERPRET=1)
  and available (the extension point `triton_interpreter` answers: emulation is never imported
  here); otherwise the emulated device keeps the CPU kernels emulation serves.
"""

import dataclasses
import importlib.util
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ..entrypoints import DeviceMode, DeviceStatus
from ..entrypoints.extensions import call
from .launch import LaunchConfig

DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # float64 keeps the plain-torch reference


class BackendKernels:
    """One backend's kernels for the torchplug ops: whether they serve, and why not."""

    kind: ClassVar[str]  # "triton", "metal": names the route in traces

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin  # e.g. "torchplug_cuda"
        self.backend: Any = None  # the Backend they register for, once it set them up
        self.serving: tuple[str, ...] = ()  # ops registered
        self.runs_as = ""  # how they run once registered, e.g. "compiled", "interpreted"
        self.problem = ""  # why they are not registered, once registering was tried
        self._waiting = False  # registration waits for torchplug.ops to be imported
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        """How traces name the route, e.g. "torchplug_cuda triton kernel"."""
        return f"{self.plugin} {self.kind} kernel"

    @property
    def mode(self) -> str:
        """Deprecated: `runs_as` (how the kernels run; "mode" is the device's DeviceMode)."""
        return self.runs_as

    def unavailable_reason(self, mode: DeviceMode) -> str | None:
        """None when the kernels can run on a device in `mode` ("native", "emulated"), else why not
        (with the fix)."""
        raise NotImplementedError

    def prepare(self, mode: DeviceMode) -> str:
        """Get ready to register (cheap); returns how they run (`runs_as`), shown by `describe()`."""
        raise NotImplementedError

    def bind(self) -> dict[str, Callable]:
        """op name -> kernel taking exactly the op's arguments."""
        raise NotImplementedError

    def register_when_ops_defined(self, backend) -> None:
        from ..dispatcher import when_torchplug_ops_defined

        self._waiting, self.backend = True, backend
        when_torchplug_ops_defined(lambda: self.register(backend))

    def register(self, backend) -> None:
        """Register every op's kernel for `backend` (idempotent); where they cannot run, record why."""
        from ..dispatcher import register

        with self._lock:
            self._waiting, self.backend = False, backend
            if self.serving:
                return
            device_mode = backend.status().mode
            self.problem = self.unavailable_reason(device_mode) or ""
            if self.problem:
                return
            how = self.prepare(device_mode)
            kernels = self.bind()
            for op, kernel in kernels.items():
                register(f"torchplug::{op}", backend.spec.name, kernel, dtypes=DTYPES, label=self.label)
            self.serving, self.runs_as = tuple(kernels), how

    def describe(self, mode: DeviceMode) -> str:
        """What serves on a device in `mode`, for `torchplug list`."""
        name = f"{self.kind.capitalize()} kernels"
        if self.serving:
            return f"{name} ({self.runs_as}) serve {', '.join(self.serving)}"
        if self._waiting:  # torchplug.ops is not imported yet: say what will happen when it is
            reason = self.unavailable_reason(mode)
            return f"{name} not active: {reason}" if reason else f"{name} register when torchplug.ops is first imported"
        return f"{name} not active: {self.problem or 'never registered'}"

    def annotate(self, status: DeviceStatus) -> DeviceStatus:
        """The backend's status with what `torchplug list` should say about these kernels."""
        if status.mode == "unavailable":
            return status
        return dataclasses.replace(status, reason="; ".join(filter(None, (status.reason, self.describe(status.mode)))))


class TritonKernels(BackendKernels):
    """torchplug.kernels' Triton source, launched with one backend's `LaunchConfig`: its profile's
    (BackendSpec.profile.launch), unless `config` is given."""

    kind = "triton"

    def __init__(self, plugin: str, config: LaunchConfig | None = None) -> None:
        super().__init__(plugin)
        self._config = config

    @property
    def config(self) -> LaunchConfig:
        """The launch configuration: the one given, else the profile's of the backend they registered for."""
        config = self._config or (self.backend.spec.profile.launch if self.backend is not None else None)
        if config is None:
            owner = self.backend.spec.name if self.backend is not None else self.plugin
            raise ValueError(f"{owner}'s Triton kernels have no launch configuration: set "
                             "DeviceProfile(launch=LaunchConfig(...)) in its BackendSpec.profile")
        return config

    def _interpreter(self) -> Any:
        """How the emulated device runs Triton kernels (the extension point `triton_interpreter`), or None."""
        return None if self.backend is None else call("triton_interpreter", self.backend)

    def unavailable_reason(self, mode: DeviceMode) -> str | None:
        if mode == "unavailable":
            return "the device is unavailable"
        if mode == "emulated":
            interpreter = self._interpreter()
            if interpreter is None:
                return "the emulated device keeps the CPU kernels: no loaded extension runs Triton kernels on it"
            reason = interpreter.unavailable_reason()
            if reason is not None:
                return f"the emulated device keeps the CPU kernels: {reason}"
            if not interpreter.requested():
                return ("the emulated device keeps the CPU kernels; set TRITON_INTERPRET=1 to run the Triton "
                        "kernels under Triton's interpreter")
            return None
        if importlib.util.find_spec("triton") is None:
            return "the triton package is not installed (pip install triton): torch's reference serves the ops"
        return None

    def prepare(self, mode: DeviceMode) -> str:
        if mode == "emulated":
            self._interpreter().enable()  # before the kernel modules define their @triton.jit functions
            return "interpreted"
        return "compiled"

    def bind(self) -> dict[str, Callable]:
        from . import activations, norms, norms_backward, rotary
        from .launch import on_device_of_first

        config = self.config

        def rms_norm(x, weight, eps):
            return norms.rms_norm(x, weight, eps, config)

        def fused_add_rms_norm_(x, residual, weight, eps):
            norms.fused_add_rms_norm_(x, residual, weight, eps, config)

        def fused_add_rms_norm(x, residual, weight, eps):
            return norms.fused_add_rms_norm(x, residual, weight, eps, config)

        def rms_norm_backward(grad, x, weight, eps, grad_residual=None):
            return norms_backward.rms_norm_backward(grad, x, weight, eps, grad_residual, config)

        def silu_and_mul(x):
            return activations.silu_and_mul(x, config)

        def silu_and_mul_backward(grad, x):
            return activations.silu_and_mul_backward(grad, x, config)

        def rotary_embedding(q, k, cos, sin):
            return rotary.rotary_embedding(q, k, cos, sin, config)

        kernels = (rms_norm, fused_add_rms_norm_, fused_add_rms_norm, rms_norm_backward, silu_and_mul,
                   silu_and_mul_backward, rotary_embedding)
        return {fn.__name__: on_device_of_first(fn) for fn in kernels}
