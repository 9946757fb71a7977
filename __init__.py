"""torchplug: out-of-tree PyTorch device backends.

This module is imported inside every ``import torch`` (through the autoload entry point), so it
stays tiny: submodules load on first attribute access.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
# The plugin contract version. A BackendSpec must declare it; bump it on incompatible change.
API_VERSION = 1



class TorchplugWarning(UserWarning):
    """The category of every warning torchplug issues: one filter silences them all."""


# Import torch before any torchplug submodule starts: if torchplug is imported first, torch's
# autoload then runs the plugin loader while no torchplug module is half-initialised.
import torch  # noqa: E402,F401

_SUBMODULES = ("codegen", "conformance", "dispatcher", "emulation", "entrypoints", "extension", "ops")
_ENTRYPOINT_EXPORTS = ("Backend", "BackendSpec", "PluginError", "backend")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f"{__name__}.{name}")
    if name in _ENTRYPOINT_EXPORTS:
        return getattr(import_module(f"{__name__}.entrypoints"), name)
    raise AttributeError(f"module 'torchplug' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULES, *_ENTRYPOINT_EXPORTS])
