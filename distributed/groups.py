"""How torch.distributed creates and destroys process groups, adapted for torchplug's devices.

"nccl" on emulated cuda, "xccl" on emulated xpu, and init_process_group() without a backend
mean torchplug's gloo-based backend there; torch itself would fail, as this build has no NCCL
or XCCL. Every group, the default one and new_group()'s, is made by
distributed_c10d._new_process_group_helper, so translating its backend argument covers all of
them: "xccl" becomes "cpu:torchplug,xpu:torchplug" (the CPU entry is where torch's c10d kernels
find gloo, see host_route.py). Only the device types torchplug serves (emulated ones, and devices
bound to their own runtime) are translated: CPU keeps gloo, and a device torch really drives keeps
its native backend. The first group made routes the served types' c10d ops to gloo (host_route.py),
whatever its backend (plain "gloo" serves emulated cuda as it serves real cuda, and a device with
its own runtime: serving.py). A group that serves an emulated type with torchplug's backend stands
for the device's library, so its collectives there follow that library's rules (NCCL's on cuda,
library_rules.cpp); a "gloo" group keeps gloo's, as on a GPU. destroy_process_group first lets
gloo's worker threads finish with the devices' work (host_route.settle), then forgets the group's
peers (peers.py).
"""

import functools
from collections.abc import Callable, Collection, Mapping

from torch.distributed import ProcessGroup
from torch.distributed import distributed_c10d as c10d

from . import host_route, peers
from .backend import NAME
from .library import FOLLOWED


def translate(backend: str, served: Collection[str], native: Mapping[str, str]) -> str:
    """`backend` as given to init_process_group/new_group, with the served devices' names replaced.

    `served` are the device types torchplug serves (emulated, or bound to their own runtime);
    `native` maps one to the name of the collective library torch would use for it (its profile's
    `collectives`: "nccl", "xccl"), which this torch build lacks."""
    text = str(backend).lower()
    if ":" in text:
        pairs = [[part.strip() for part in pair.split(":", 1)] for pair in text.split(",")]
        return ",".join(f"{d}:{NAME if d in served and b in (native.get(d), NAME) else b}" for d, b in pairs)
    if text == c10d.Backend.UNDEFINED:
        # torch would pick the accelerator's backend; an emulated cuda is no accelerator on a CPU
        # build (torch reports "cpu"), so any job here without a native accelerator gets ours.
        accelerator = _accelerator_type()
        devices = sorted(served) if served and (accelerator in served or accelerator == "cpu") else []
    else:
        devices = sorted(d for d in served if native.get(d) == text or text == NAME)
    return ",".join(f"{d}:{NAME}" for d in ["cpu", *devices]) if devices else text


def served_by_us(backend: str) -> list[str]:
    """The device types that a translated backend string hands to torchplug's backend."""
    pairs = [pair.split(":", 1) for pair in str(backend).lower().split(",") if ":" in pair]
    return [device.strip() for device, name in pairs if name.strip() == NAME and device.strip() != "cpu"]


def _accelerator_type() -> str:
    import torch

    try:
        return torch._C._get_accelerator().type
    except RuntimeError:  # torch names a PrivateUse1 device first, and asks for its hooks, which its first use binds
        return torch._C._get_privateuse1_backend_name()


def install(served: Callable[[], Mapping[str, host_route.Route]], native: Mapping[str, str]) -> None:
    """Wrap torch.distributed's group creation and destruction. Idempotent.

    `served()` maps each device type torchplug serves to its route; `native` as in translate()."""
    if getattr(c10d._new_process_group_helper, "__torchplug__", False):
        return
    create, destroy = c10d._new_process_group_helper, c10d.destroy_process_group

    @functools.wraps(create)
    def new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
        for device_type, route in served().items():
            host_route.install(device_type, route)
        translated = translate(backend, served(), native)
        group, store = create(group_size, group_rank, global_ranks_in_group, c10d.Backend(translated), *args, **kwargs)
        if isinstance(group, ProcessGroup):
            if translated != str(backend).lower():
                # torch sets a default backend only for single names or when NCCL is among them.
                group._set_default_backend(ProcessGroup.BackendType.CUSTOM)
            for device_type in served_by_us(translated):
                if native.get(device_type) in FOLLOWED:  # the group stands for the device's library
                    host_route.follow_library(group, device_type, native[device_type])
        return group, store

    @functools.wraps(destroy)
    def destroy_process_group(*args, **kwargs):
        host_route.settle()
        try:
            return destroy(*args, **kwargs)
        finally:
            peers.keep_only(set(map(str, c10d._world.pg_names.values())))

    new_process_group_helper.__torchplug__ = True
    c10d._new_process_group_helper = new_process_group_helper
    c10d.destroy_process_group = destroy_process_group
    import torch.distributed as dist

    dist.destroy_process_group = destroy_process_group
