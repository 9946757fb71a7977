"""The c10d backend torchplug registers for emulated devices: torch's own gloo, on host memory.

`init_process_group("xccl")` on emulated xpu (or "nccl" on emulated cuda, or no backend at all)
creates a ProcessGroupGloo serving the emulated device types and the CPU. Its collectives reach
gloo through host_route.py, which presents the device tensors as CPU tensors over the same bytes.
"""

import os
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import ProcessGroupGloo

from . import host_route

NAME = "torchplug"  # the name torch.distributed.get_backend() reports for an emulated group


class MixedDevicesError(RuntimeError):
    """The ranks of one process group do not emulate the same device types."""


def create(options: "dist.distributed_c10d._DistributedBackendOptions", _backend_options: object) -> ProcessGroupGloo:
    """Backend.register_backend's creator (extended API): one gloo group for the emulated device types."""
    from . import emulated_types

    served = emulated_types()
    for device_type, dispatch_key in served.items():
        host_route.install(device_type, dispatch_key)
    _check_same_devices(options.store, options.group_rank, options.group_size, sorted(served), options.timeout)
    gloo = ProcessGroupGloo(options.store, options.group_rank, options.group_size, timeout=options.timeout)
    gloo.options.global_ranks_in_group = list(options.global_ranks_in_group)
    gloo.options.group_name = options.group_id
    gloo._set_sequence_number_for_group()
    return gloo


def _check_same_devices(store: dist.Store, rank: int, size: int, types: list[str], timeout: timedelta) -> None:
    """Refuse a job whose ranks emulate different device types (say xpu on one, cuda on another).

    Real hardware cannot run one collective across device types; gloo would, silently. Every rank
    publishes what it emulates and reads the others', so all of them raise, none waits for a peer.
    """
    mine = ",".join(types)
    store.set(f"torchplug/emulated/{rank}", mine)
    store.set_timeout(timeout)
    others = {r: store.get(f"torchplug/emulated/{r}").decode() for r in range(size) if r != rank}
    different = {r: theirs for r, theirs in others.items() if theirs != mine}
    if different:
        listing = "; ".join(f"rank {r}: {t or 'none'}" for r, t in sorted(different.items()))
        raise MixedDevicesError(
            f"rank {rank} emulates {mine or 'no device types'} (TORCHPLUG_EMULATE="
            f"{os.environ.get('TORCHPLUG_EMULATE', '')!r}) but {listing}. Every rank of a process group must "
            "use the same device type: set the same TORCHPLUG_EMULATE for all of them."
        )
