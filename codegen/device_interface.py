"""Dynamo's view of a host-memory device: a DeviceInterface over its torchplug device module.

torch's own interfaces for cuda, xpu and mps cannot serve a CPU build (no raw streams, no MPS
core count), and a new PrivateUse1 name has none, so every device type a host-memory target
serves (emulated, or with its own runtime's launch_host) gets this one.
"""

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface


def register_interface(module: Any, refused_dtypes: frozenset[torch.dtype], triton_capable: bool = False,
                       capability: int | None = None) -> None:
    """Make Dynamo and Inductor reach the device `module` (the object behind torch.<device>, with torch.cuda's
    names) through our interface; the device lacks `refused_dtypes`.

    `triton_capable` is True in fidelity mode, where Inductor generates Triton for the device, and
    `capability` the compute capability Triton's heuristics see there (the device module reports none).
    """
    from torch._dynamo.device_interface import get_registered_device_interfaces, register_interface_for_device

    interface = interface_for(module, refused_dtypes, triton_capable, capability)
    # torch fills its built-in interfaces lazily, overwriting cuda/xpu/mps: let it, then replace.
    dict(get_registered_device_interfaces())
    register_interface_for_device(module.type, interface)
    for index in range(module.device_count()):
        register_interface_for_device(f"{module.type}:{index}", interface)


def interface_for(module: Any, refused_dtypes: frozenset[torch.dtype], triton_capable: bool = False,
                  capability: int | None = None) -> type[DeviceInterface]:
    """A DeviceInterface class serving the device module `module`."""

    class HostMemoryInterface(DeviceInterface):
        device = module.device
        Stream = module.Stream
        Event = module.Event

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                module.set_device(device)

            @staticmethod
            def current_device() -> int:
                return module.current_device()

            @staticmethod
            def get_device_properties(device: torch.types.Device = None) -> Any:
                return module.get_device_properties(device)

        current_device = staticmethod(module.current_device)
        set_device = staticmethod(module.set_device)
        exchange_device = staticmethod(module._exchange_device)
        maybe_exchange_device = staticmethod(module._maybe_exchange_device)
        device_count = staticmethod(module.device_count)
        is_available = staticmethod(module.is_available)
        stream = staticmethod(module.stream)
        current_stream = staticmethod(module.current_stream)
        set_stream = staticmethod(module.set_stream)
        synchronize = staticmethod(module.synchronize)
        memory_allocated = staticmethod(module.memory_allocated)

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            module.set_stream(module.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return 0  # kernels run synchronously on the host: there is no stream to hand them

        @staticmethod
        def get_compute_capability(device: torch.types.Device = None) -> Any:
            if capability is not None:
                return capability
            props = module.get_device_properties(device)
            return props.major * 10 + props.minor

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return torch.bfloat16 not in refused_dtypes

        @classmethod
        def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
            return dtype not in refused_dtypes

        @staticmethod
        def is_triton_capable(device: torch.types.Device = None) -> bool:
            return triton_capable

        @staticmethod
        def is_gpu() -> bool:  # torch >= 2.15 builds Inductor's GPU_TYPES from it; earlier releases never ask
            return triton_capable  # fidelity mode generates GPU (Triton) code; the host target is host memory

    HostMemoryInterface.__name__ = HostMemoryInterface.__qualname__ = f"HostMemory{module.type.capitalize()}Interface"
    return HostMemoryInterface
