"""torch.distributed on torchplug's emulated devices: collectives run by torch's gloo on host memory.

See docs/distributed.md. Names load on first access: the collectives part (part.py) is
imported inside every ``import torch`` and must not pull in the rest.
"""

from ..lazy import lazy_exports

__all__, _MODULE_OF, __getattr__ = lazy_exports(__name__, {
    "backend": ("NAME",),
    "peers": ("MixedDevicesError",),
    "serving": ("collective_backend", "emulated_types", "serve"),
})
