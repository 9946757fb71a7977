"""Which codegen target serves a backend, from the mode it runs in."""

import threading

from ..entrypoints.compile_target import CodegenTarget
from ..entrypoints.extensions import call
from ..entrypoints.torch_devices import torch_device_type

_lock = threading.Lock()
_targets: dict[str, CodegenTarget | None] = {}  # by backend name: one target per process


def target_for(backend) -> CodegenTarget | None:
    """The target torch.compile uses for `backend` (a torchplug Backend), or None when it has none.

    Native devices keep torch's own target; every emulated device type shares the host target, and so
    does a new device type whose runtime part runs host code on its memory (a `host_launcher`).
    """
    name = backend.spec.name
    with _lock:
        if name not in _targets:
            _targets[name] = _choose(backend)
        return _targets[name]


def _choose(backend) -> CodegenTarget | None:
    mode, device_type = backend.status().mode, backend.spec.device_type
    if mode == "emulated":
        from . import fidelity

        if arch := fidelity.requested(backend):
            return fidelity.TritonInterpreterTarget(backend.spec.name, device_type, arch)
        if fidelity.requested_for_metal(device_type):
            from .metal import MetalCaptureTarget

            return MetalCaptureTarget(device_type)
        from .host import HostCppTarget

        return HostCppTarget(device_type)
    if mode == "native":
        if torch_device_type(device_type) is None and call("host_launcher", backend) is not None:
            from .host import HostCppTarget  # torch has no codegen for the new device type: ours runs there

            return HostCppTarget(device_type)
        from .native import NativeTarget

        return NativeTarget(device_type)
    return None
