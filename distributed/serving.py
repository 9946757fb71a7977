"""Serving torch.distributed's backend names on emulated devices, and naming the backend of each device.

Installed at autoload for each emulated device type (cheap: a few dictionary entries and one
wrapped function in torch.distributed); the c10d kernels are registered when the first process
group is created. Native devices are left alone: torch's NCCL, RCCL, XCCL and gloo serve them.
See docs/distributed.md.
"""

import threading

import torch
import torch.distributed as dist

from ..entrypoints.torch_devices import CUDA
from .backend import NAME

_lock = threading.Lock()
_served: dict[str, str] = {}  # emulated device type -> its dispatch key
_native: dict[str, str] = {}  # emulated device type -> the collective library torch would use natively


def emulated_types() -> dict[str, str]:
    """The emulated device types whose collectives torchplug serves, with their dispatch keys."""
    return dict(_served)


def serve(device_type: str, dispatch_key: str, native: str | None = None,
          version: tuple[int, ...] | None = None) -> None:
    """Make torch.distributed's usual backend names work on the emulated `device_type`: torchplug's,
    and `native`, the collective library torch uses for the device natively (its profile's), whose
    rules the device's collectives then follow and whose availability and `version` torch reports."""
    # `device_type` is emulated: even a build with the real library (NCCL in a CUDA build) cannot
    # drive it, so the emulated route serves the library's name there too.
    if not dist.is_available():
        return
    from . import backend, ddp_hooks, groups, library

    with _lock:
        _served[device_type] = dispatch_key
        if native:
            _native[device_type] = native
        dist.Backend.register_backend(NAME, backend.create, extended_api=True, devices=["cpu", *_served])
        # register_backend leaves devices that already have a default alone; this one's default
        # (nccl/xccl) cannot drive an emulated device, so ours takes its place.
        dist.Backend.default_device_backend_map[device_type] = NAME
        groups.install(lambda: _served, _native)
        library.advertise(native, version)
        if native == "nccl" and device_type == CUDA.name:
            ddp_hooks.install()


def collective_backend(device_type: str, mode: str) -> str:
    """The torch.distributed backend serving `device_type` here, for `torchplug list`."""
    if mode == "unavailable":
        return "-"
    if device_type in _served:
        return f"{NAME} (gloo on host memory)"
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
