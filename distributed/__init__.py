"""torch.distributed on torchplug's emulated devices: collectives run by torch's gloo on host memory.

See docs/distributed.md. Names load on first access: the collectives extension (extension.py) is
imported inside every ``import torch`` and must not pull in the rest.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "backend": ("NAME",),
    "peers": ("MixedDevicesError",),
    "serving": ("collective_backend", "emulated_types", "serve"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
