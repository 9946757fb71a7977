"""Four planted defects: each kernel's values are right, its semantics are not.

Registered through torchplug's public kernel API, as a plugin author would. The suite must name
every one by mode and op (tests/test_conformance_depth.py).
"""

import torch

from torchplug.dispatcher import enable_fallback, set_fallback_policy
from torchplug.dispatcher import register


def transpose_copying(self: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    """A fresh contiguous tensor, not a view: writes through the "view" are lost."""
    return self.cpu().transpose(dim0, dim1).contiguous().to(self.device)


def clone_dropping_layout(self: torch.Tensor, *, memory_format: torch.memory_format | None = None) -> torch.Tensor:
    """preserve_format (the default) comes back contiguous: channels_last and other dense layouts are lost."""
    if memory_format in (None, torch.preserve_format):
        memory_format = torch.contiguous_format
    return self.cpu().clone(memory_format=memory_format).to(self.device)


def index_select_wrong_error(self: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """An out-of-range index raises ValueError, where torch raises IndexError."""
    try:
        return torch.index_select(self.cpu(), dim, index.cpu()).to(self.device)
    except IndexError as err:
        raise ValueError(str(err)) from None


def plant(backend: str) -> None:
    register("aten::transpose.int", backend, transpose_copying, label="acme planted defect")
    register("aten::clone", backend, clone_dropping_layout, label="acme planted defect")
    register("aten::index_select", backend, index_select_wrong_error, label="acme planted defect")
    # A factory served by the CPU fallback: right values, but device memory made by host code and copied over.
    enable_fallback(backend, ops=["aten::zeros_like"])
    set_fallback_policy(backend, "allow", ops=["aten::zeros_like"])
