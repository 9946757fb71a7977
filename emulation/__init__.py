"""torchplug's emulated device runtime: xpu, mps, cuda (or rocm) and new PrivateUse1 devices on
any machine, several at once, backed by host memory and the CPU kernels.

Opt-in through TORCHPLUG_EMULATE=xpu,mps,cuda (backend names); see docs/emulation.md and
config.py for the other variables. The emulation part (part.py) is imported inside every
``import torch``; without TORCHPLUG_EMULATE nothing else of this package is, and even with it only
the light modules are: the C++ runtime (csrc/) is compiled and loaded on first device use. Names
therefore load on first access.
"""

import warnings
from typing import Any

from ..lazy import lazy_exports

__all__, _MODULE_OF, _exported = lazy_exports(__name__, {
    "request": ("status_for",),
    "emulated": ("EmulatedDevices", "emulated_devices"),
    "config": ("EmulationConfig", "EmulationConfigError"),
    "runtime": ("EmulationNotice", "ensure"),
})
# Names before issue 31 gave them ones that say what they are; deprecated.
RENAMED = {"Attachment": "EmulatedDevices", "attached": "emulated_devices"}


def __getattr__(name: str) -> Any:
    if name in RENAMED:
        warnings.warn(f"torchplug.emulation.{name} is deprecated: use torchplug.emulation.{RENAMED[name]}",
                      DeprecationWarning, stacklevel=2)
        name = RENAMED[name]
    return _exported(name)
