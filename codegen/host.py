"""The host target: torch.compile with Inductor's C++ kernels on memory the host reaches.

An emulated device's tensors live in host memory, so the code Inductor generates for the CPU runs
on them unchanged. A device with its own runtime that offers launch_host (a window in which host
code may work on its memory) runs the same kernels inside that window. What differs is around the
kernels: the wrapper allocates on the device and launches each kernel through the device's
launcher (wrapper.py), Dynamo needs a device interface (device_interface.py), and Inductor must
treat the device type as host memory (patches.py).
"""

import warnings
from collections.abc import Hashable
from typing import Any

from .. import TorchplugWarning
from ..entrypoints.torch_devices import torch_device_type
from .host_memory import HostMemoryTarget

VERSION = 3  # bump when the generated code changes: it joins Inductor's cache key


class HostCppTarget(HostMemoryTarget):
    """Inductor's C++ codegen for one device type whose memory the host reaches (emulated, or through launch_host)."""

    @property
    def name(self) -> str:
        return f"host-cpp ({self.launcher().label})"

    def unavailable_reason(self) -> str | None:
        return super().unavailable_reason() or self.launcher().unavailable_reason

    def uuid(self) -> Hashable:
        from .wrapper import source_digest

        launcher = self.launcher()  # a graph compiled to launch one way never serves a device that launches another
        return ("torchplug-host-cpp", VERSION, self.device_type, launcher.module, launcher.name, source_digest())

    def prepare(self, module: Any) -> tuple[Any, Any, Any]:
        from torch._inductor.codegen.cpp import CppScheduling

        from .device_interface import register_interface
        from .patches import add_host_device
        from .wrapper import host_wrapper

        add_host_device(self.device_type)
        register_interface(module, self.refused_dtypes())
        return CppScheduling, host_wrapper(self.launcher()), RefusedCppWrapper


def compile_on_host(compile_fx: Any, model: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
    """Run Inductor's `compile_fx`, adjusted where a graph's inputs live on a host-memory device (the host target's).

    CUDA graphs (mode="reduce-overhead" / "max-autotune"): emulated cuda has them
    (emulation/graphs.py), so Inductor wraps the compiled graph in one as on a GPU, without graph
    partitions: partitioning treats a host-memory device's kernels as CPU work and splits every one
    out, which would leave nothing to graph. Inductor graphs only 'cuda'; on other such devices
    the graph compiles without them, with a warning.
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
        if len(host) == 1 and (known := torch_device_type(host[0])) is not None and known.cuda_api:
            if patches.get("graph_partition", config.graph_partition):  # compile_fx applies the patch and calls again
                kwargs["config_patches"] = {**patches, "graph_partition": False}
        else:
            _warn(f"torch.compile runs without CUDA graphs on the {', '.join(host)} device: Inductor "
                  "captures CUDA graphs for 'cuda' devices only (mode='reduce-overhead' and 'max-autotune' ask "
                  "for them)")
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
            f"torch.compile(options={{'cpp_wrapper': True}}) is not supported on the '{device}' device: "
            f"Inductor's C++ wrapper calls torch's kernels through aoti_torch_{device}_* C shims, which this "
            "torch build does not have. Compile without cpp_wrapper: the default Python wrapper runs the same "
            "C++ kernels, calling torch's ops through the dispatcher."
        )
