"""Attachment: one backend served by the emulated runtime, and the record of every attached one.

A module of its own, below the runtime, its hooks and its device modules, which all read it;
attach.py decides what to attach.
"""

from dataclasses import dataclass

import torch

from ..entrypoints import DeviceProfile, EmulatedShape


@dataclass(frozen=True)
class Attachment:
    """One backend served by the emulated runtime."""

    backend: str  # torchplug backend name, e.g. "rocm"
    device_type: str  # torch device type, e.g. "cuda"
    dispatch_key: str  # "CUDA", "XPU", "MPS" or "PrivateUse1"
    count: int
    capacities: tuple[int, ...]  # bytes per device, 0 = unlimited
    refused_dtypes: frozenset[torch.dtype]  # standard dtypes the backend does not declare
    profile: DeviceProfile  # the backend's own: label, emulated shapes, ...
    shape: EmulatedShape  # the model it answers as (TORCHPLUG_EMULATE_GPU, else the profile's default)

    @property
    def label(self) -> str:
        return self.profile.label or self.backend

    @property
    def device_name(self) -> str:
        return f"torchplug emulated {self.shape.name or self.label} (host memory)"


_attached: dict[str, Attachment] = {}  # by torch device type, in attach order (attach.py records under its lock)


def attached() -> dict[str, Attachment]:
    return dict(_attached)


def record(attachment: Attachment) -> None:
    _attached[attachment.device_type] = attachment
