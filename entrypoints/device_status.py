"""DeviceStatus: how a backend's device is provided here, or why it is not."""

from dataclasses import dataclass
from typing import Literal

Mode = Literal["native", "emulated", "unavailable"]


@dataclass(frozen=True)
class DeviceStatus:
    mode: Mode
    reason: str = ""  # why the device is unavailable, or how it is provided
