"""DDP's check of the bf16 compression hook, on emulated cuda in a torch build without CUDA.

`DistributedDataParallel.register_comm_hook(state, bf16_compress_hook)` is refused ("BF16 all
reduce communication hook required CUDA 11+ and NCCL 2.10+") unless `torch.version.cuda` (or
`.hip`) is set and `torch.cuda.nccl.version() >= (2, 10)`. On the CPU wheel `torch.version.cuda`
is None, so a job that registers the hook on a GPU machine (HF accelerate's
`DDPCommunicationHookType.BF16`) failed on emulated cuda, whose emulated NCCL is newer than 2.10.
For a DDP module on emulated cuda, the hook is checked by its other rules only (callable, its
annotations); everywhere else torch's check runs unchanged. A CUDA build passes torch's check by
itself, and there this patch is not installed.
"""

import functools
from collections.abc import Callable

import torch

from ..entrypoints.torch_devices import CUDA
from . import library

_BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")  # the names DDP's check looks for


def install() -> None:
    """Wrap DistributedDataParallel._check_comm_hook, on builds without CUDA or ROCm. Idempotent."""
    from torch.nn.parallel import DistributedDataParallel

    check = getattr(DistributedDataParallel, "_check_comm_hook", None)
    if CUDA.built() or check is None or getattr(check, "__torchplug__", False):
        return

    @functools.wraps(check)
    def _check_comm_hook(self: DistributedDataParallel, hook: Callable) -> None:
        version = library.emulated_version("nccl")
        if (getattr(hook, "__name__", None) in _BF16_HOOKS and getattr(self, "device_type", None) == CUDA.name
                and version is not None and version >= (2, 10)):
            hook = _renamed(hook)
        return check(self, hook)

    _check_comm_hook.__torchplug__ = True
    DistributedDataParallel._check_comm_hook = _check_comm_hook


def _renamed(hook: Callable) -> Callable:
    """`hook` under another name, with its signature (inspect follows __wrapped__), for torch's other checks."""

    @functools.wraps(hook)
    def checked(*args, **kwargs):
        return hook(*args, **kwargs)

    checked.__name__ = f"emulated_nccl_{hook.__name__}"
    return checked
