"""torchplug's emulated device runtime: xpu, mps, cuda (or rocm) and new PrivateUse1 devices on
any machine, several at once, backed by host memory and the CPU kernels.

Opt-in through TORCHPLUG_EMULATE=xpu,mps,cuda (backend names); see docs/emulation.md and
config.py for the other variables. This package is imported inside ``import torch`` only when
TORCHPLUG_EMULATE is set, and even then only its light modules: the C++ runtime (csrc/) is
compiled and loaded on first device use.
"""

from typing import Any

from .attach import Attachment, attach, attached, status_for
from .config import EmulationConfig, EmulationConfigError, current as config

__all__ = [
    "Attachment", "EmulationConfig", "EmulationConfigError", "EmulationNotice", "attach", "attached", "config",
    "device_module", "ensure", "status_for",
]


def ensure() -> Any:
    """Load (building on first use) and configure the runtime; returns its extension module."""
    from .runtime import ensure as _ensure

    return _ensure()


def device_module(device_type: str) -> Any:
    """The emulated device module serving `device_type` (e.g. 'xpu'), or None."""
    from .hooks import device_module as _device_module

    return _device_module(device_type)


def __getattr__(name: str) -> Any:
    if name == "EmulationNotice":
        from .runtime import EmulationNotice

        return EmulationNotice
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
