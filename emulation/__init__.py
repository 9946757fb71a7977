"""torchplug's emulated device runtime: xpu, mps, cuda (or rocm) and new PrivateUse1 devices on
any machine, several at once, backed by host memory and the CPU kernels.

Opt-in through TORCHPLUG_EMULATE=xpu,mps,cuda (backend names); see docs/emulation.md and
config.py for the other variables. The emulation extension (extension.py) is imported inside every
``import torch``; without TORCHPLUG_EMULATE nothing else of this package is, and even with it only
the light modules are: the C++ runtime (csrc/) is compiled and loaded on first device use. Names
therefore load on first access.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "attach": ("Attachment", "attached", "status_for"),
    "config": ("EmulationConfig", "EmulationConfigError"),
    "hooks": ("device_module",),
    "runtime": ("EmulationNotice", "ensure"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
