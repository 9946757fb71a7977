"""Without TORCHPLUG_EMULATE: torch's error for an absent cuda or xpu says that torchplug can emulate it.

A script written for cuda or xpu, run on a machine without that GPU, fails on its first device
tensor: "Torch not compiled with CUDA enabled" on a CPU wheel, "Found no NVIDIA driver on your
system" on a CUDA build. When a torchplug plugin for that device is installed, the same error
gains one sentence: how to emulate it. Only the error text changes; nothing else is patched and
nothing is loaded, and where the device initialises, nothing changes at all.
"""

import functools
from typing import Any

import torch

from ..entrypoints.torch_devices import torch_device_type

_hinted: dict[str, list[str]] = {}  # device type -> backend names that could emulate it


def hint_emulation(device_type: str, backend_name: str) -> None:
    """Add "set TORCHPLUG_EMULATE=<backend>" to torch's error on first use of an absent cuda or xpu."""
    known = torch_device_type(device_type)
    if known is None or not known.lazy_init:  # only torch.<type>._lazy_init() raises torch's error
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
            message = (f"{err}. torchplug can emulate '{device_type}' in host memory: set {settings} before "
                       "starting Python (docs/emulation.md)")
            try:
                hinted = type(err)(message)
            except Exception:  # an error type that does not take a message alone
                hinted = RuntimeError(message)
            raise hinted from None

    module._lazy_init = _lazy_init
