"""The c10d backend torchplug registers for emulated devices: torch's own gloo, on host memory.

`init_process_group("xccl")` on emulated xpu (or "nccl" on emulated cuda, or no backend at all)
creates a ProcessGroupGloo serving the emulated device types and the CPU. Their collectives reach
it through host_route.py, which presents the device tensors as CPU tensors over the same bytes.
"""

import torch.distributed as dist
from torch.distributed import ProcessGroupGloo

from . import peers

NAME = "torchplug"  # the name torch.distributed.get_backend() reports for an emulated group


def create(options: "dist.distributed_c10d._DistributedBackendOptions", _backend_options: object) -> ProcessGroupGloo:
    """Backend.register_backend's creator (extended API): one gloo group for the emulated device types."""
    from . import emulated_types

    peers.exchange(options, sorted(emulated_types()))
    gloo = ProcessGroupGloo(options.store, options.group_rank, options.group_size, timeout=options.timeout)
    gloo.options.global_ranks_in_group = list(options.global_ranks_in_group)
    gloo.options.group_name = options.group_id
    gloo._set_sequence_number_for_group()
    return gloo
