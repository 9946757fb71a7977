"""The emulation runtime part (extension points): emulates the backends TORCHPLUG_EMULATE lists.

Declared in torchplug's ``torchplug.extensions`` entry points. Without the variable it only adds
the "torchplug can emulate this device" hint to torch's error, and imports nothing else. The other
runtime parts never import emulation: they ask these extension points (`device_mode`, `device_memory`,
`ready`, `device_module`, `host_launcher`, `triton_interpreter`) through the contract.
"""

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from ..entrypoints import STANDARD_DTYPES, DeviceMemory, DeviceMode, DeviceStatus, HostLauncher, RuntimePart
from .config import emulation_requested


class Emulation(RuntimePart):
    def setup(self, backend: Any) -> None:
        if emulation_requested():
            from .config import requested_names
            from .request import emulate_if_requested

            emulate_if_requested(backend, STANDARD_DTYPES - backend.spec.dtypes)
            if backend.spec.name in requested_names():
                return
        from .hint import hint_emulation

        hint_emulation(backend.spec.device_type, backend.spec.name)

    def check_environment(self, plugins: Sequence[str]) -> None:
        if emulation_requested():  # the other TORCHPLUG_EMULATE_* settings only act with it
            from .request import check_settings

            check_settings(plugins)

    def status(self, backend: Any) -> DeviceStatus | None:
        if not emulation_requested():
            return None
        from .request import status_for

        found = status_for(backend)  # emulated, or why the requested emulation is not possible, and the fix
        return None if found is None else DeviceStatus(*found)

    def device_mode(self, backend: Any) -> DeviceMode | None:
        if not emulation_requested():  # without it, nothing more of emulation is imported
            return None
        from .emulated import emulated_devices

        devices = emulated_devices().get(backend.spec.device_type)
        return "emulated" if devices is not None and devices.backend == backend.spec.name else None

    def device_memory(self, backend: Any) -> DeviceMemory | None:
        return "host" if self.device_mode(backend) == "emulated" else None  # host memory: readable in place

    def ready(self, backend: Any) -> None:
        if self.device_mode(backend) == "emulated":  # its own kernels go in first: others capture or override them
            from .runtime import ensure

            ensure()

    def triton_interpreter(self, backend: Any) -> ModuleType | None:
        if self.device_mode(backend) != "emulated":  # host memory: Triton kernels run only interpreted
            return None
        from . import triton_interpreter

        return triton_interpreter

    def device_module(self, backend: Any) -> Any:
        if self.device_mode(backend) != "emulated":
            return None
        from .hooks import device_module

        return device_module(backend.spec.device_type)

    def host_launcher(self, backend: Any) -> HostLauncher | None:
        # Host memory: kernels just run, and are recorded while a CUDA graph captures.
        if self.device_mode(backend) != "emulated":
            return None
        return HostLauncher("torchplug.emulation.graph_capture", "launch_host_kernel", "emulated")
