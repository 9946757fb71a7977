"""torchplug's emulated device runtime: xpu, mps, cuda (or rocm) and new PrivateUse1 devices on
any machine, several at once, backed by host memory and the CPU kernels.

Opt-in through TORCHPLUG_EMULATE=xpu,mps,cuda (backend names); see docs/emulation.md and
config.py for the other variables. The emulation part (part.py) is imported inside every
``import torch``; without TORCHPLUG_EMULATE nothing else of this package is, and even with it only
the light modules are: the C++ runtime (csrc/) is compiled and loaded on first device use. Names
therefore load on first access.
"""

from ..lazy import lazy_exports

__all__, _MODULE_OF, __getattr__ = lazy_exports(__name__, {
    "attach": ("status_for",),
    "attachment": ("Attachment", "attached"),
    "config": ("EmulationConfig", "EmulationConfigError"),
    "runtime": ("EmulationNotice", "ensure"),
})
