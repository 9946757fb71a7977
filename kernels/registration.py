"""Registering the shared Triton kernels for one GPU backend, under its own key and launch config.

A device plugin holds one `TritonKernels` and calls `register_when_ops_defined(backend)` from its
`setup()`. Nothing heavy happens inside ``import torch``: the kernels register when torchplug.ops
is first imported, and only where they can run:

- native device: Triton compiles them for the GPU (triton must be installed);
- emulated device: Triton's interpreter runs them on host memory, when it is requested
  (TRITON_INTERPRET=1) and available (emulation.triton_interpreter decides); otherwise the
  emulated device keeps the CPU kernels emulation serves, and `describe()` says why.
"""

import dataclasses
import importlib.util
import threading
from collections.abc import Callable

import torch

from ..emulation import triton_interpreter
from ..entrypoints import DeviceStatus
from .launch import LaunchConfig

OPS = ("rms_norm", "fused_add_rms_norm_", "fused_add_rms_norm", "rms_norm_backward", "silu_and_mul",
       "silu_and_mul_backward", "rotary_embedding")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # float64 keeps the plain-torch reference


class TritonKernels:
    """The Triton kernels of one backend: whether they serve, and why not."""

    def __init__(self, plugin: str, config: LaunchConfig) -> None:
        self.plugin = plugin  # e.g. "torchplug_cuda": named in traces and in `torchplug list`
        self.config = config
        self.serving: tuple[str, ...] = ()  # ops registered
        self.mode = ""  # "compiled" or "interpreted" once registered
        self.problem = "not registered yet: they register when torchplug.ops is first imported"
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        """How traces name the route, e.g. "torchplug_cuda triton kernel"."""
        return f"{self.plugin} triton kernel"

    def register_when_ops_defined(self, backend) -> None:
        from ..dispatcher import when_torchplug_ops_defined

        when_torchplug_ops_defined(lambda: self.register(backend))

    def unavailable_reason(self, backend) -> str | None:
        """None when the kernels can run on `backend`'s device here, else why not (with the fix)."""
        mode = backend.status().mode
        if mode == "unavailable":
            return "the device is unavailable"
        if mode == "emulated":
            reason = triton_interpreter.unavailable_reason()
            if reason is not None:
                return f"the emulated device keeps the CPU kernels: {reason}"
            if not triton_interpreter.requested():
                return ("the emulated device keeps the CPU kernels; set TRITON_INTERPRET=1 to run the Triton "
                        "kernels under Triton's interpreter")
            return None
        if importlib.util.find_spec("triton") is None:
            return "the triton package is not installed (pip install triton): torch's reference serves the ops"
        return None

    def register(self, backend) -> None:
        """Register every op's kernel for `backend` (idempotent); on failure record why."""
        from ..dispatcher import register

        with self._lock:
            if self.serving:
                return
            self.problem = self.unavailable_reason(backend) or ""
            if self.problem:
                return
            interpreted = backend.status().mode == "emulated"
            if interpreted:
                triton_interpreter.enable()  # before the kernel modules define their @triton.jit functions
            kernels = _bind(self.config)
            for op in OPS:
                register(f"torchplug::{op}", backend.spec.name, kernels[op], dtypes=DTYPES, label=self.label)
            self.serving = OPS
            self.mode = "interpreted" if interpreted else "compiled"

    def describe(self) -> str:
        if self.serving:
            return f"Triton kernels ({self.mode}) serve {', '.join(self.serving)}"
        return f"Triton kernels not active: {self.problem}"

    def annotate(self, status: DeviceStatus) -> DeviceStatus:
        """The backend's status with what `torchplug list` should say about these kernels."""
        if status.mode == "unavailable":
            return status
        return dataclasses.replace(status, reason="; ".join(filter(None, (status.reason, self.describe()))))


def _bind(config: LaunchConfig) -> dict[str, Callable]:
    """Each op's kernel with `config` bound, taking exactly the op's arguments."""
    from . import activations, norms, norms_backward, rotary

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
    return {fn.__name__: fn for fn in kernels}
