"""Applying a backend's launch configuration (`LaunchConfig`, written in its BackendSpec.profile.launch)
to torchplug.kernels' Triton kernels: grid sizes, warps and the compiler options its Triton accepts.

Importing this module does not import Triton: device plugins name their config at autoload.
"""

from collections.abc import Callable, Mapping
from functools import lru_cache, wraps
from typing import Any, TypeVar

import torch

from ..entrypoints.profile import LaunchConfig, next_power_of_2

T = TypeVar("T")
__all__ = ["LaunchConfig", "launch_options", "next_power_of_2", "on_device_of_first", "reduction_programs"]


def reduction_programs(device: torch.device, rows: int) -> int:
    """Programs for a kernel that reduces over rows (each sums its share, then one sum of the partial
    results): a few per compute unit, so every unit is busy."""
    return max(1, min(rows, 4 * _compute_units(device)))


def launch_options(config: LaunchConfig, block: int, element_bytes: int) -> dict[str, Any]:
    """Keyword options for `kernel[grid](..., **options)`."""
    return {"num_warps": config.num_warps(block, element_bytes), **_accepted(config.options)}


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
