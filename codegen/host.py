"""The host target: torch.compile for emulated devices, with Inductor's C++ kernels on host memory.

An emulated device's tensors live in host memory, so the code Inductor generates for the CPU runs
on them unchanged. What differs is around the kernels: the wrapper allocates on the device and
calls kernels without streams (wrapper.py), Dynamo needs a device interface (device_interface.py),
and Inductor must treat the device type as host memory (patches.py).
"""

import threading
import warnings
from collections.abc import Hashable
from textwrap import dedent
from typing import Any

from .. import TorchplugWarning
from ..entrypoints.compile_target import CodegenTarget

VERSION = 1  # bump when the generated code changes: it joins Inductor's cache key
_lock = threading.Lock()


class HostCppTarget(CodegenTarget):
    """Inductor's C++ codegen for one emulated device type."""

    name = "host-cpp (emulated)"

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self._installed = False

    def unavailable_reason(self) -> str | None:
        from .patches import unsupported_reason

        return unsupported_reason()

    def uuid(self) -> Hashable:
        return ("torchplug-host-cpp", VERSION, self.device_type)

    def install(self) -> None:
        with _lock:
            if self._installed:
                return
            from torch._inductor.codegen import common
            from torch._inductor.codegen.cpp import CppScheduling

            from ..emulation.hooks import device_module
            from .device_interface import register_interface
            from .passes import TargetPass
            from .patches import add_host_device
            from .wrapper import HostWrapperCodegen

            module = device_module(self.device_type)
            add_host_device(self.device_type)
            register_interface(module)
            common.register_backend_for_device(
                self.device_type, CppScheduling, HostWrapperCodegen, RefusedCppWrapper,
                device_custom_pass=TargetPass(self),
            )
            # torch registers its own cuda/xpu/mps overrides when first asked: let it, then replace.
            common._initialize_device_op_overrides()
            common.register_device_op_overrides(self.device_type, host_op_overrides(self.device_type))
            self._installed = True


def host_op_overrides(device_type: str) -> Any:
    """The snippets Inductor's Python wrapper writes for device and stream handling on an emulated device."""
    from torch._inductor.codegen.common import DeviceOpOverrides

    class HostDeviceOpOverrides(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return dedent(f"""
                def {name}(_):
                    return 0
                """)

        def set_device(self, device_idx: int) -> str:
            return "pass"  # the device guard around the kernels made it current

        def synchronize(self) -> str:
            return "pass"  # host kernels have finished when they return

        def device_guard(self, device_idx: int) -> str:
            return f"torch.{device_type}.device({device_idx})"

    return HostDeviceOpOverrides()


def compile_on_host(compile_fx: Any, model: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
    """Run Inductor's `compile_fx`, adjusted where a graph's inputs live on an emulated device.

    CUDA graphs (mode="reduce-overhead" / "max-autotune") need a real GPU: the graph compiles
    without them, with a warning.
    """
    import torch
    from torch._inductor import config

    from .patches import emulated_device_types

    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    host = sorted({t.device.type for t in tensors} & emulated_device_types())
    if not host:
        return compile_fx(model, example_inputs, *args, **kwargs)
    patches = dict(kwargs.get("config_patches") or {})
    if patches.get("triton.cudagraphs", config.triton.cudagraphs):
        _warn(f"torch.compile runs without CUDA graphs on the emulated {', '.join(host)} device: an emulated "
              "device has no graphs to capture (mode='reduce-overhead' and 'max-autotune' ask for them)")
        kwargs["config_patches"] = {**patches, "triton.cudagraphs": False}
    return compile_fx(model, example_inputs, *args, **kwargs)


def _warn(message: str) -> None:
    warnings.warn(f"torchplug: {message}", TorchplugWarning, stacklevel=3)


class RefusedCppWrapper:
    """Registered as the host target's C++ wrapper: refuses `cpp_wrapper=True` with the reason."""

    supports_caching = True  # nothing is generated, so there is nothing to cache wrongly

    @staticmethod
    def create(*args: Any, **kwargs: Any) -> Any:
        from torch._inductor.virtualized import V

        device = V.graph.device_type
        raise RuntimeError(
            f"torch.compile(options={{'cpp_wrapper': True}}) is not supported on the emulated '{device}' device: "
            f"Inductor's C++ wrapper calls torch's kernels through aoti_torch_{device}_* C shims, which this "
            "torch build does not have. Compile without cpp_wrapper: the default Python wrapper runs the same "
            "C++ kernels, calling torch's ops through the dispatcher."
        )
