"""The backend names users write, resolved for emulated devices.

"nccl" on emulated cuda, "xccl" on emulated xpu, and init_process_group() without a backend all
mean torchplug's gloo-based backend there; torch itself would fail (this build has no NCCL or
XCCL). Every process group, the default one and new_group()'s, is created by
distributed_c10d._new_process_group_helper, so translating its backend argument covers them all.
CPU keeps gloo, and a device torch really drives (a CUDA build's cuda) keeps its native backend:
only emulated device types are translated.
"""

import functools
from collections.abc import Callable, Collection

from torch.distributed import distributed_c10d as c10d

from .backend import NAME

# The collective library each device type's own name stands for; torch lacks them where we emulate.
NATIVE = {"cuda": ("nccl",), "xpu": ("xccl",)}


def translate(backend: str, emulated: Collection[str]) -> str:
    """`backend` as given to init_process_group/new_group, with emulated devices' names replaced."""
    text = str(backend).lower()
    if text == c10d.Backend.UNDEFINED:
        # torch picks the accelerator's backend. An emulated cuda cannot be torch's accelerator on a
        # CPU build (it reports "cpu"), so a job with emulated devices and no native one gets ours.
        accelerator = _accelerator_type()
        return NAME if emulated and (accelerator in emulated or accelerator == "cpu") else text
    if ":" in text:
        pairs = [part.split(":", 1) for part in text.split(",")]
        return ",".join(f"{d}:{_native_to_ours(d.strip(), b.strip(), emulated)}" for d, b in pairs)
    if any(text in NATIVE.get(device, ()) for device in emulated):
        return NAME
    return text


def _native_to_ours(device: str, backend: str, emulated: Collection[str]) -> str:
    return NAME if device in emulated and backend in NATIVE.get(device, ()) + (NAME,) else backend


def _accelerator_type() -> str:
    import torch

    return torch._C._get_accelerator().type


def wrap_helper(emulated: Callable[[], Collection[str]]) -> None:
    """Make distributed_c10d create emulated groups under NAME. Idempotent."""
    original = c10d._new_process_group_helper
    if getattr(original, "__torchplug__", False):
        return

    @functools.wraps(original)
    def helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
        translated = translate(backend, emulated())
        return original(group_size, group_rank, global_ranks_in_group, c10d.Backend(translated), *args, **kwargs)

    helper.__torchplug__ = True
    c10d._new_process_group_helper = helper
