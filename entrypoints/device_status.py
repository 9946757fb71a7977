"""DeviceStatus: how a backend's device is provided here, or why it is not."""

from dataclasses import dataclass
from typing import Literal

# How the device is provided: by torch's own runtime on real hardware, by torchplug's emulation in host
# memory, or not at all. ("Mode" alone also names a kernel's way of running and a conformance check.)
DeviceMode = Literal["native", "emulated", "unavailable"]
Mode = DeviceMode  # deprecated alias: the name before DeviceMode
# Where the device's memory is, for code that moves its bytes (collectives): memory the host may read in
# place (emulation), or the device's own, which only its runtime's copies and launches reach.
DeviceMemory = Literal["host", "own"]


@dataclass(frozen=True)
class DeviceStatus:
    mode: DeviceMode
    reason: str = ""  # why the device is unavailable, or how it is provided
    fix: str = ""  # for an unavailable device: what to do; "" when the usual fix (emulate it) applies

    def fix_for(self, name: str) -> str:
        """What makes the unavailable device `name` usable: its own fix, else emulating it."""
        return self.fix or f"run where the hardware and a torch build for it are present, or emulate the device " \
                           f"in host memory: TORCHPLUG_EMULATE={name}"
