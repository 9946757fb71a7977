"""torchplug: out-of-tree PyTorch device backends.

This module is imported inside every ``import torch`` (through the autoload entry point), so it
stays tiny: submodules load on first attribute access.
"""

import sys
import warnings
from importlib import import_module
from typing import Any

__version__ = "0.1.0"
# The plugin contract version. A BackendSpec must declare it; bump it on incompatible change.
API_VERSION = 1
# The torch releases torchplug's core (its patches of torch internals, its C++) is tested on: 2.13-2.15
# on CPU and CUDA wheels, 2.11 on the lent GPU machines (docs/compatibility.md). Each plugin declares
# its own range in its pyproject.toml; the loader refuses every plugin on a torch outside this one.
TORCH_RANGE = ">=2.11,!=2.12.*,<2.16"



class TorchplugWarning(UserWarning):
    """The category of every warning torchplug issues: one filter silences them all."""


def _internal(module: str) -> bool:
    """torchplug, its plugins (torchplug_*), torch (whose import runs the autoload) and the import machinery."""
    top = module.split(".")[0]
    return top.startswith(("torchplug", "_frozen_importlib")) or top in ("torch", "importlib")


def warn(message: str, category: type[Warning] = TorchplugWarning) -> None:
    """warnings.warn, attributed to the user's line: the first caller outside `_internal` modules."""
    frame = sys._getframe(1)
    while frame.f_back is not None and _internal(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
    # No module_globals: like warnings.warn, read the source line from the file (a `python -c`
    # module's loader would raise ImportError here).
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))


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


# Import torch before any torchplug submodule starts: if torchplug is imported first, torch's autoload
# then runs the plugin loader while no torchplug submodule is half-initialised. It comes last, after
# __getattr__, because that autoload imports plugins that write `from torchplug import Backend` while
# this module is still initialising; the lazy names must already resolve then.
import torch  # noqa: E402,F401
