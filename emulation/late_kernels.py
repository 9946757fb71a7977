"""Kernels a CUDA build's libraries register after emulated cuda was set up take the host path too.

On first use, every op with a kernel under torch's CUDA key is given the emulator's host path
(csrc/native_kernels.cpp). A library imported later (torchvision, torchaudio, a custom extension)
registers its own CUDA kernels as it loads, and those would reach a driver that is not there.
So while emulated cuda runs on such a build, loading a C extension or a torch.ops library is
watched: the ops it defines with a CUDA kernel are adopted as soon as it has loaded, as the CPU
wheel serves them through the fallback. Ops defined by Python code keep the kernels registered
for them (torch.library's "cuda" kernels are the user's own, on every build).
"""

import functools
import importlib.machinery
from types import ModuleType
from typing import Any

import torch

_watched: set[str] = set()  # dispatch keys


def watch(ext: ModuleType, dispatch_key: str) -> None:
    """From now on, libraries that load kernels for `dispatch_key` have them adopted after loading. Idempotent."""
    if dispatch_key in _watched:
        return
    _watched.add(dispatch_key)
    loader = importlib.machinery.ExtensionFileLoader
    for owner, name in ((loader, "create_module"), (loader, "exec_module"), (type(torch.ops), "load_library")):
        setattr(owner, name, _adopting(getattr(owner, name), ext, dispatch_key))


def _adopting(load: Any, ext: ModuleType, dispatch_key: str) -> Any:
    @functools.wraps(load)
    def loads_then_adopts(*args: Any, **kwargs: Any) -> Any:
        mark = ext.defined_ops_mark()
        try:
            return load(*args, **kwargs)
        finally:
            ext.adopt_native_kernels_since(dispatch_key, mark)

    return loads_then_adopts
