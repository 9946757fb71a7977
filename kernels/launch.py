"""Launch configurations: how each GPU backend sizes the blocks and warps of the shared kernels.

The Triton source is the same for every backend; what differs is the hardware's unit of
execution. NVIDIA runs warps of 32 threads, AMD wavefronts of 64 (a block narrower than a
wavefront leaves lanes idle), and Intel GPUs sub-groups of 16 or 32 with up to 1024 work-items
per work-group. Each GPU plugin declares its own `LaunchConfig` (BackendSpec.profile.launch) and
registers the kernels with it.

Importing this module does not import Triton: device plugins name their config at autoload.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache, wraps
from types import MappingProxyType
from typing import Any, TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class LaunchConfig:
    name: str  # the backend it is for, e.g. "cuda"
    warp_size: int  # threads per warp / wavefront / sub-group
    max_warps: int  # warps per program (block): 1024 threads on all three
    vector_bytes: int = 16  # bytes one thread loads at a time: 128-bit accesses
    max_row_block: int = 16384  # longest row a normalisation holds in registers; longer rows loop
    elementwise_block: int = 1024  # elements per program for elementwise kernels
    # Backend compiler options, passed only where the active Triton backend declares them
    # (Intel renamed threads_per_warp to warp_size; passing an unknown option is an error).
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def row_block(self, n: int) -> int:
        """Block for one row of `n` elements: the whole row when it fits, never narrower than a warp."""
        return max(self.warp_size, min(next_power_of_2(max(n, 1)), self.max_row_block))

    def num_warps(self, block: int, element_bytes: int) -> int:
        """Enough warps that each thread moves about one vector of the block, as a power of two."""
        per_warp = self.warp_size * max(1, self.vector_bytes // element_bytes)
        warps = next_power_of_2(max(1, block // per_warp))
        return min(warps, self.max_warps)

    def reduction_programs(self, device: torch.device, rows: int) -> int:
        """Programs for a kernel that reduces over rows (each sums its share, then one sum of the
        partial results): a few per compute unit, so every unit is busy."""
        return max(1, min(rows, 4 * _compute_units(device)))

    def launch_options(self, block: int, element_bytes: int) -> dict[str, Any]:
        """Keyword options for `kernel[grid](..., **options)`."""
        return {"num_warps": self.num_warps(block, element_bytes), **_accepted(self.options)}


@lru_cache(maxsize=None)
def _compute_units(device: torch.device) -> int:
    """SMs (CUDA), compute units (ROCm, XPU); 1 under the interpreter, which runs programs one by one."""
    from triton import knobs

    if knobs.runtime.interpret:
        return 1
    properties = getattr(torch, device.type).get_device_properties(device)
    for name in ("multi_processor_count", "max_compute_units"):
        if getattr(properties, name, 0):
            return int(getattr(properties, name))
    return 64


def on_device_of_first(kernel: Callable[..., T]) -> Callable[..., T]:
    """`kernel` run with its first argument's device current: Triton launches on the current
    device, which need not be the tensors' (e.g. cuda:1 while cuda:0 is current)."""
    @wraps(kernel)
    def run(first: torch.Tensor, *rest: Any) -> T:
        from triton import knobs

        if knobs.runtime.interpret:  # the interpreter runs on the host, whatever the device
            return kernel(first, *rest)
        with getattr(torch, first.device.type).device(first.device):
            return kernel(first, *rest)
    return run


def next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _accepted(options: Mapping[str, Any]) -> dict[str, Any]:
    if not options:
        return {}
    known = _backend_option_names()
    return {k: v for k, v in options.items() if k in known}


@lru_cache(maxsize=1)
def _backend_option_names() -> frozenset[str]:
    """The compile options the active Triton backend accepts (none under the interpreter)."""
    from triton import knobs

    if knobs.runtime.interpret:
        return frozenset()
    from triton.compiler.compiler import make_backend
    from triton.runtime.driver import driver

    backend = make_backend(driver.active.get_current_target())
    return frozenset(vars(backend.parse_options({})))
