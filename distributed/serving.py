"""Serving torch.distributed's backend names on torchplug's devices, and naming the backend of each device.

Installed at autoload for each emulated device type and each device bound to its own runtime
(cheap: a few dictionary entries and one wrapped function in torch.distributed); the c10d kernels
are registered when the first process group is created. Devices torch drives itself are left
alone: torch's NCCL, RCCL, XCCL and gloo serve them. See docs/distributed.md.
"""

import threading
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ..entrypoints.torch_devices import CUDA
from .backend import NAME

if TYPE_CHECKING:
    from .host_route import Route

_lock = threading.Lock()
_served: dict[str, "Route"] = {}  # device type -> how its c10d ops reach gloo (host_route.Route)
_native: dict[str, str] = {}  # emulated device type -> the collective library torch would use natively


def emulated_types() -> dict[str, str]:
    """The emulated device types whose collectives torchplug serves (on host aliases), with their dispatch keys."""
    return {device_type: route.dispatch_key for device_type, route in _served.items() if not route.staged}


def serve(device_type: str, dispatch_key: str, native: str | None = None,
          version: tuple[int, ...] | None = None, staged: bool = False) -> None:
    """Make torch.distributed's usual backend names work on `device_type`: torchplug's, and `native`,
    the collective library torch uses for the device natively (its profile's), whose rules the
    device's collectives then follow and whose availability and `version` torch reports.

    `staged`: the device has memory of its own, which the host cannot read; its collectives copy
    the tensors to the host and back through the device's copies (else they run on host aliases).
    "gloo" then serves it too, as torch's gloo serves cuda."""
    # An emulated `device_type`: even a build with the real library (NCCL in a CUDA build) cannot
    # drive it, so the emulated route serves the library's name there too.
    if not dist.is_available():
        return
    from . import backend, ddp_hooks, groups, library
    from .host_route import Route

    with _lock:
        _served[device_type] = Route(dispatch_key, staged)
        if native:
            _native[device_type] = native
        dist.Backend.register_backend(NAME, backend.create, extended_api=True, devices=["cpu", *_served])
        # register_backend leaves devices that already have a default alone; this one's default
        # (nccl/xccl) cannot drive an emulated device, so ours takes its place.
        dist.Backend.default_device_backend_map[device_type] = NAME
        gloo = dist.Backend.backend_capability[dist.Backend.GLOO]
        if staged and device_type not in gloo:
            gloo.append(device_type)  # init_process_group("gloo") gives the group a backend for it
        groups.install(lambda: dict(_served), _native)
        library.advertise(native, version)
        if native == "nccl" and device_type == CUDA.name:
            ddp_hooks.install()


def collective_backend(device_type: str, mode: str) -> str:
    """The torch.distributed backend serving `device_type` here, for `torchplug list`."""
    if mode == "unavailable":
        return "-"
    if device_type in _served:
        return f"{NAME} (gloo, staged through the device's copies)" if _served[device_type].staged \
            else f"{NAME} (gloo on host memory)"
    if not dist.is_available():
        return "- (torch built without distributed)"
    name = dist.Backend.default_device_backend_map.get(device_type, "-")
    if name not in ("-", "gloo") and not _has_native_backend(name):
        return f"- (torch built without {name.upper()})"
    return "nccl (RCCL)" if name == "nccl" and torch.version.hip else name


def _has_native_backend(name: str | None) -> bool:
    """Never shadow a real collective library: emulation only happens on builds without one."""
    if not name:
        return False
    available = getattr(dist, f"is_{name}_available", None)  # torch's own check, where it has one
    return bool(available()) if available is not None else dist.is_backend_available(name)
