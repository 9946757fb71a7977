"""EmulatedDevices: one backend's devices served by the emulated runtime, and the record of all of them.

A module of its own, below the runtime, its hooks and its device modules, which all read it;
request.py decides which backends run emulated (formerly attachment.py: Attachment and attached()).
"""

from dataclasses import dataclass

import torch

from ..entrypoints import DeviceProfile, EmulatedShape


@dataclass(frozen=True)
class EmulatedDevices:
    """One backend served by the emulated runtime."""

    backend: str  # torchplug backend name, e.g. "rocm"
    device_type: str  # torch device type, e.g. "cuda"
    dispatch_key: str  # "CUDA", "XPU", "MPS" or "PrivateUse1"
    count: int
    capacities: tuple[int, ...]  # bytes per device: TORCHPLUG_EMULATE_MEMORY, else the model's, else the host's
    refused_dtypes: frozenset[torch.dtype]  # standard dtypes the backend does not declare
    profile: DeviceProfile  # the backend's own: label, emulated shapes, ...
    shape: EmulatedShape  # the model it answers as (TORCHPLUG_EMULATE_GPU, else the profile's default)

    @property
    def label(self) -> str:
        return self.profile.label or self.backend

    @property
    def device_name(self) -> str:
        return f"torchplug emulated {self.shape.name or self.label} (host memory)"


_emulated: dict[str, EmulatedDevices] = {}  # by torch device type, in the order request.py records them (under its lock)


def emulated_devices() -> dict[str, EmulatedDevices]:
    """The emulated device types of this process, by torch device type."""
    return dict(_emulated)


def record(devices: EmulatedDevices) -> None:
    _emulated[devices.device_type] = devices
