"""torch.compile's host kernels on a device with its own runtime: each runs inside the runtime's launch_host.

The device's memory is readable by the host only inside that window, so Inductor's C++ kernels,
which the host target generates (codegen/host.py), run there: the wrapper Inductor writes calls
`launch_host_kernel` for each one (the `host_launcher` extension point names it). Everything else
the wrapper does (allocations, extern ops such as mm) goes through the dispatcher, outside any
window: windows never nest.
"""

from typing import Any

import torch

from ..entrypoints.compile_target import HostLauncher
from . import bound

LABEL = "launch_host"


def launcher(backend: Any) -> HostLauncher:
    """How compiled code launches host kernels on `backend`'s device, or why it cannot (no launch_host)."""
    try:
        runtime = backend.runtime()
    except Exception as err:  # the device is unavailable: its status says so too
        return HostLauncher(__name__, "launch_host_kernel", LABEL, str(err))
    reason = None
    if not runtime.table.contents.launch_host:
        reason = (f"plugin {backend.spec.name!r}: its device runtime {runtime.name!r} has no launch_host entry, "
                  "which torch.compile needs to run the C++ kernels Inductor generates on "
                  f"'{backend.spec.device_type}' memory. Fix: implement launch_host in the runtime's table "
                  "(torchplug/device_runtime.h), or run the model without torch.compile")
    return HostLauncher(__name__, "launch_host_kernel", LABEL, reason)


def launch_host_kernel(kernel: Any, name: str, writes: tuple[int, ...] | None, *args: Any, **kwargs: Any) -> Any:
    """Run the compiled host kernel `kernel(*args)` inside the runtime's launch_host window on the device of
    its tensor arguments (the current device when it has none), holding the GIL (csrc/module.cpp says why).
    `name` and `writes` serve emulated devices' graph capture; a runtime's device runs each kernel once, when
    it is launched."""
    device_type = torch._C._get_privateuse1_backend_name()
    ext = bound.bound_extension()
    device = next((a.device.index for a in args if isinstance(a, torch.Tensor) and a.device.type == device_type),
                  None)
    return ext.launch_host(ext.current_device() if device is None else device, kernel, args, kwargs or None)
