"""Replacing a function of torch's everywhere torch keeps it, not only under its public name.

torch's modules import each other's functions by name (torch.cuda.memory does `from . import
is_initialized`; torch.cuda.graphs `from torch._C import _cuda_isCurrentStreamCapturing`), so
setting torch.cuda.is_initialized alone would leave torch.cuda.memory asking the original. Here
every loaded module under a prefix that holds an original (by identity, under any name) gets the
replacement too, so torch.cuda and its submodules agree.
"""

import sys
from typing import Any


def replace(owner: Any, replacements: dict[str, Any], modules_under: str) -> dict[str, Any]:
    """Set each attribute on `owner` and in the loaded modules named `modules_under`*; returns the
    originals that existed, by name."""
    originals: dict[str, Any] = {}
    swapped: dict[int, Any] = {}
    for name, value in replacements.items():
        found = getattr(owner, name, None)
        if found is not None and found is not value:
            originals[name] = found
            swapped[id(found)] = value
        setattr(owner, name, value)
    if swapped:
        for module_name, module in list(sys.modules.items()):
            if module is None or module is owner or not module_name.startswith(modules_under):
                continue
            for attribute, value in list(vars(module).items()):
                if id(value) in swapped:
                    setattr(module, attribute, swapped[id(value)])
    return originals
