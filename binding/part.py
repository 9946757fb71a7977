"""The binding runtime part (extension points): a backend with its own runtime (RuntimeBackend) becomes a torch device.

Declared in torchplug's ``torchplug.extensions`` entry points. At autoload it only names the device
(torch's PrivateUse1 slot), registers torch.<name> and the tensor methods: cheap Python. The runtime
library is loaded, and the binding compiled, on first device use.
"""

from typing import Any

import torch

from ..entrypoints.compile_target import HostLauncher
from ..entrypoints.device_runtime import RuntimeBackend
from ..entrypoints.device_status import DeviceMemory
from ..entrypoints.extensions import RuntimePart
from ..entrypoints.torch_devices import PRIVATEUSE1


class Binding(RuntimePart):
    before = ("emulation",)  # a device with its own runtime is never emulated

    def setup(self, backend: Any) -> None:
        if not isinstance(backend, RuntimeBackend):
            return
        from .device_module import register
        from .pinning import bind_on_first_pin

        name = backend.spec.device_type
        taken = torch._C._get_privateuse1_backend_name()
        if taken != name:
            if taken != PRIVATEUSE1.name:
                raise RuntimeError(f"torchplug: the device '{name}' needs torch's PrivateUse1 slot, which '{taken}' "
                                   "already holds (torch has one per process); disable one of the two plugins")
            torch.utils.rename_privateuse1_backend(name)
        torch._register_device_module(name, register(backend))
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
        bind_on_first_pin(backend)

    def device_memory(self, backend: Any) -> DeviceMemory | None:
        return "own" if isinstance(backend, RuntimeBackend) else None  # only the runtime's copies reach it

    def device_module(self, backend: Any) -> Any:
        if not isinstance(backend, RuntimeBackend):
            return None
        from .device_module import registered

        return registered(backend.spec.device_type)

    def host_launcher(self, backend: Any) -> HostLauncher | None:
        if not isinstance(backend, RuntimeBackend):
            return None
        from .launcher import launcher

        return launcher(backend)
