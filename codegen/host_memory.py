"""HostMemoryTarget: the steps every compile target for a device whose memory Inductor's kernels reach
from the host takes to install itself: an emulated device (host memory), or a device whose runtime runs
host code on its memory (launch_host).

Inductor learns a device type from four registrations: Dynamo's device interface, a scheduling
(which kernels it generates), a wrapper codegen (the Python that calls them) with the target's
pass carrying its `uuid()` into the cache key, and device op overrides (the wrapper's device and
stream snippets). A target supplies its scheduling and wrapper from `prepare()`; the rest is here.
What the device itself provides (the module behind torch.<device>, how its host kernels launch) is
asked through the extension points, of the runtime part that provides the device.
"""

import threading
from collections.abc import Hashable
from textwrap import dedent
from typing import Any

from ..entrypoints import STANDARD_DTYPES
from ..entrypoints.compile_target import CodegenTarget, HostLauncher
from ..entrypoints.extensions import call
from .provider import providing

_lock = threading.Lock()


class HostMemoryTarget(CodegenTarget):
    """One device type's target. Subclasses implement `prepare` and `uuid`."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self._installed = False

    def unavailable_reason(self) -> str | None:
        from .patches import unsupported_reason

        return unsupported_reason()

    def prepare(self, module: Any) -> tuple[Any, Any, Any]:
        """Patch what this target needs and register Dynamo's interface for the device `module` (the object
        behind torch.<device>); return (scheduling, wrapper codegen, C++ wrapper codegen or None) for Inductor."""
        raise NotImplementedError

    def uuid(self) -> Hashable:
        raise NotImplementedError

    def backend(self) -> Any:
        """The loaded backend whose device this is (`providing`)."""
        found = providing(self.device_type)
        if found is None:
            raise RuntimeError(f"torchplug: no loaded plugin provides the '{self.device_type}' device (emulated or "
                               "with its own runtime), so torch.compile has nothing to target there")
        return found

    def launcher(self) -> HostLauncher:
        """How the device's generated wrapper launches host kernels (the device's `host_launcher`)."""
        found = call("host_launcher", self.backend())
        if found is None:
            raise RuntimeError(f"torchplug: no runtime part says how host kernels launch on the "
                               f"'{self.device_type}' device (extension point host_launcher)")
        return found

    def refused_dtypes(self) -> frozenset[Any]:
        """The standard dtypes the device lacks: Inductor is told it does not support them."""
        return STANDARD_DTYPES - self.backend().spec.dtypes

    def install(self) -> None:
        with _lock:
            if self._installed:
                return
            from torch._inductor.codegen import common

            from .passes import TargetPass

            scheduling, wrapper, cpp_wrapper = self.prepare(call("device_module", self.backend()))
            common.register_backend_for_device(self.device_type, scheduling, wrapper, cpp_wrapper,
                                               device_custom_pass=TargetPass(self))
            # torch registers its own cuda/xpu/mps overrides when first asked: let it, then replace.
            common._initialize_device_op_overrides()
            common.register_device_op_overrides(self.device_type, host_op_overrides(self.device_type))
            self._installed = True


def host_op_overrides(device_type: str) -> Any:
    """The snippets Inductor's Python wrapper writes for device and stream handling on a host-memory device."""
    from torch._inductor.codegen.common import DeviceOpOverrides

    class HostDeviceOpOverrides(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return dedent(f"""
                def {name}(_):
                    return 0
                """)

        def set_device(self, device_idx: int) -> str:
            return "pass"  # the device guard around the kernels made it current

        def synchronize(self) -> str:
            return "pass"  # host kernels have finished when they return

        def device_guard(self, device_idx: int) -> str:
            return f"torch.{device_type}.device({device_idx})"

    return HostDeviceOpOverrides()
