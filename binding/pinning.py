"""Pinned memory before the device's first use.

torch pins host memory through the accelerator's hooks, which the binding registers when it binds
the runtime (on first device use). Until then `Tensor.pin_memory()` would fail with torch's "register
PrivateUse1HooksInterface" error, and so would `DataLoader(pin_memory=True)`, which pins for
torch.accelerator's device (this one), even in a program that never uses the device. So at autoload
a CPU kernel for aten::_pin_memory waits for the first pin: it binds the runtime, steps aside for
good, and torch's own kernel pins.
"""

import threading
from typing import Any

import torch

from . import bound

_lock = threading.Lock()
_library: torch.library.Library | None = None


def bind_on_first_pin(backend: Any) -> None:
    global _library

    def pin(tensor: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
        bound.extension(backend)  # its hooks are torch's from here on; the bind stepped this kernel aside
        return torch.ops.aten._pin_memory.default(tensor, device)

    library = torch.library.Library("aten", "IMPL")
    library.impl("_pin_memory", pin, "CPU")
    with _lock:
        _library = library
    bound.when_bound(lambda ext: _step_aside())


def _step_aside() -> None:
    global _library
    with _lock:
        library, _library = _library, None
    if library is not None:
        library._destroy()
