"""Without TORCHPLUG_EMULATE: torch's "not compiled with ..." error says that torchplug can emulate the device.

A script written for cuda or xpu, run on a machine whose torch lacks that runtime, fails on its
first device tensor with torch's bare "Torch not compiled with CUDA enabled". When a torchplug
plugin for that device is installed, the same error gains one sentence: how to emulate it. Only
the error text changes; nothing else is patched and nothing is loaded.
"""

import functools
from typing import Any

import torch

_hinted: dict[str, list[str]] = {}  # device type -> backend names that could emulate it


def _compiled_in(device_type: str) -> bool:
    if device_type == "cuda":
        return bool(torch.version.cuda or torch.version.hip)
    return device_type == "xpu" and torch.xpu._is_compiled()


def hint_emulation(device_type: str, backend_name: str) -> None:
    """Add "set TORCHPLUG_EMULATE=<backend>" to torch's error on first use of an absent cuda or xpu."""
    if device_type not in ("cuda", "xpu") or _compiled_in(device_type):
        return
    names = _hinted.setdefault(device_type, [])
    if backend_name in names:
        return
    names.append(backend_name)
    if len(names) > 1:
        return  # the wrapper reads the list when it raises
    module: Any = getattr(torch, device_type)
    original = module._lazy_init

    @functools.wraps(original)
    def _lazy_init() -> None:
        try:
            original()
        except (AssertionError, RuntimeError) as err:
            settings = " or ".join(f"TORCHPLUG_EMULATE={name}" for name in names)
            raise type(err)(f"{err}. torchplug can emulate '{device_type}' in host memory: set {settings} "
                            "before starting Python (docs/emulation.md)") from None

    module._lazy_init = _lazy_init
