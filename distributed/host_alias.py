"""Host aliases: an emulated device tensor seen as a CPU tensor over the same bytes, without a copy.

Emulated device memory is host memory (torchplug.emulation), so gloo can read and write it in
place once the tensor is presented with a CPU device. The alias does not own its memory: whoever
hands it to a collective keeps the device tensor alive until that collective has completed.
"""

import torch

_CPU = torch.device("cpu")


def host_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor with `tensor`'s sizes, strides and offset over the same host memory."""
    storage = tensor.untyped_storage()
    host = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), _CPU, storage.nbytes())
    return torch.empty(0, dtype=tensor.dtype).set_(host, tensor.storage_offset(), tensor.size(), tensor.stride())
