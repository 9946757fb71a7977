"""The host target's patches of Inductor's and Dynamo's device tables, checked against the torch
version (torchplug.TORCH_RANGE: 2.11, 2.13-2.15). Other subsystems patch torch internals in their own
modules (emulation/hooks.py, distributed/groups.py, codegen/entry.py, emulation/triton_interpreter.py,
torchplug_cpu/inductor.py); docs/compatibility.md lists every internal touched, by subsystem.

Inductor hard-codes which device types are GPUs and which get its C++ (host) codegen. A device
served by the host target keeps its own type (tensors stay on 'xpu', 'mps', 'npu', ...) but
Inductor must treat it as host memory: not a GPU, C++ kernels, CPU fusion rules. The patches
below do exactly that and nothing else; they are applied once, the first time a host target is
installed, after checking the installed torch is one they were verified against.

Differences between the supported releases:
- torch 2.15's `has_triton` takes `include_cpu`; the replacement passes it through.
- torch 2.15 computes `GPU_TYPES` from each registered DeviceInterface's `is_gpu()`;
  device_interface.py answers it (a GPU only in fidelity mode), and `add_host_device` still
  removes host-memory types from the list, for the releases that hard-code it.
"""

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from .. import TORCH_RANGE
from ..entrypoints.torch_devices import TORCH_DEVICE_TYPES
from ..entrypoints.versions import version_in_range

_TRITON_TYPES = tuple(t.name for t in TORCH_DEVICE_TYPES.values() if t.inductor == "triton")  # what torch generates Triton for
_host_types: set[str] = set()
_interpreted_types: set[str] = set()  # fidelity mode: Triton codegen, run by Triton's interpreter
_applied = False


class TorchInternalsChanged(RuntimeError):
    """torch's internals are not what torchplug's host compile target was written against."""


def emulated_device_types() -> frozenset[str]:
    """The device types a torchplug target (host or fidelity) compiles for in this process."""
    return frozenset(_host_types | _interpreted_types)


def unsupported_reason() -> str | None:
    """None when the installed torch is one the patches were verified against, else why not."""
    if not version_in_range(torch.__version__, TORCH_RANGE):
        return (f"torch {torch.__version__} is outside the range torchplug's compile patches were "
                f"verified against ({TORCH_RANGE}); install a torch in that range")
    return None


def add_host_device(device_type: str) -> None:
    """Make Inductor treat `device_type` as host memory (C++ kernels, not a GPU). Idempotent."""
    _apply_once()
    from torch._inductor import config, utils

    _host_types.add(device_type)
    # In place: several Inductor modules hold this very list under their own name.
    while device_type in utils.GPU_TYPES:
        utils.GPU_TYPES.remove(device_type)
    utils.get_gpu_type.cache_clear()
    # Inductor reads config.cuda_backend / xpu_backend directly (is_triton, the online-softmax
    # pattern). An emulated type has no native device of that type in the process, so the
    # setting only ever concerns the emulated one.
    if hasattr(config, f"{device_type}_backend"):
        setattr(config, f"{device_type}_backend", "cpp")


def patch_dynamo_streams(dynamo: ModuleType) -> None:
    """Dynamo asks torch.accelerator for a device's current stream, but several emulated device
    types share a process while torch has one accelerator: ask the device's own module instead."""
    from torch._dynamo import utils

    from ..entrypoints.extensions import call
    from .provider import providing

    _require(utils, "get_current_stream")
    original = utils.get_current_stream
    modules: dict[str, Any] = {}  # device type -> the device module a runtime part provides, or None

    def get_current_stream(device: torch.device) -> torch.Stream:
        if device.type not in modules:
            backend = providing(device.type)
            modules[device.type] = None if backend is None else call("device_module", backend)
        module = modules[device.type]
        return original(device) if module is None else module.current_stream(device)

    # Compiled code calls this on entry, from guards too: Dynamo must not evaluate its own frames.
    replacement = dynamo.disable(get_current_stream, reason="torchplug's stream lookup for emulated devices")
    _replace_everywhere("torch._dynamo", "get_current_stream", original, replacement)


def add_interpreted_device(device_type: str, driver: Any) -> None:
    """Let Inductor generate Triton for emulated `device_type`, with `driver` standing in for a GPU's."""
    _apply_once()
    import triton
    from torch._inductor.runtime import triton_helpers

    _require(triton_helpers, "set_driver_to_gpu")
    _interpreted_types.add(device_type)
    triton.runtime.driver.set_active(driver)
    original = triton_helpers.set_driver_to_gpu
    if getattr(original, "torchplug_keeps", None) is None:

        def set_driver_to_gpu() -> None:
            # Generated kernels ask for a GPU driver; with none present, the stand-in stays active.
            if triton.runtime.driver.active is not set_driver_to_gpu.torchplug_keeps:
                original()

        triton_helpers.set_driver_to_gpu = set_driver_to_gpu
    triton_helpers.set_driver_to_gpu.torchplug_keeps = driver


def replace_metal_compiler(runtime_utils: ModuleType, compile_shader: Callable[[str], Any]) -> None:
    """Inductor compiles its Metal libraries through runtime_utils.compile_mps_shader (torch.mps.compile_shader)."""
    _apply_once()
    _require(runtime_utils, "compile_mps_shader", "compile_mps_shaders")
    runtime_utils.compile_mps_shader = compile_shader


def _apply_once() -> None:
    global _applied
    if _applied:
        return
    reason = unsupported_reason()
    if reason is not None:
        raise TorchInternalsChanged(reason)
    from torch._inductor import config, scheduler, utils

    _require(utils, "GPU_TYPES", "get_gpu_type", "get_current_backend")
    _require(scheduler.BaseSchedulerNode, "is_cpu")
    _require(scheduler.Scheduler, "create_backend")
    original_is_cpu = scheduler.BaseSchedulerNode.is_cpu
    original_create_backend = scheduler.Scheduler.create_backend
    original_backend = utils.get_current_backend

    def is_cpu(self: Any) -> bool:
        # Gates the CPU fusion and loop-order rules that C++ codegen relies on.
        if original_is_cpu(self):
            return True
        device = self.get_device()
        return device is not None and device.type in _host_types

    def get_current_backend(device_type: str | None = None) -> str:
        if device_type is None:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        if device_type in _host_types:
            return config.cpu_backend  # torch answers "triton" for cuda and any new device name
        return original_backend(device_type)

    from torch.utils import _triton

    original_has_triton = _triton.has_triton

    def has_triton(**options: bool) -> bool:
        # torch 2.15 added has_triton(include_cpu=...); earlier releases take no argument, and
        # pass none, so whatever the caller passed goes through unchanged.
        if _interpreted_types:
            return True  # the fidelity target installed only after finding the triton package
        # torch asks whether any cuda/xpu device is available; a host-memory one cannot run Triton.
        if _host_types and not any(t not in _host_types and getattr(torch, t).is_available() for t in _TRITON_TYPES):
            return False
        return original_has_triton(**options)

    has_triton.cache_clear = original_has_triton.cache_clear  # type: ignore[attr-defined]
    def create_backend(self: Any, device: torch.device) -> Any:
        # torch checks for Triton (and a CUDA capability >= 7) whatever scheduling is registered.
        if device.type not in _host_types:
            return original_create_backend(self, device)
        from torch._inductor.codegen.common import get_scheduling_for_device
        from torch._inductor.virtualized import V

        V.graph.add_device_info(device)
        return get_scheduling_for_device(device.type)(self)

    scheduler.BaseSchedulerNode.is_cpu = is_cpu
    scheduler.Scheduler.create_backend = create_backend
    _replace_everywhere("torch._inductor", "get_current_backend", original_backend, get_current_backend)
    _replace_everywhere("torch.", "has_triton", original_has_triton, has_triton)
    _applied = True


def _require(owner: Any, *names: str) -> None:
    missing = [name for name in names if not hasattr(owner, name)]
    if missing:
        raise TorchInternalsChanged(
            f"torch {torch.__version__}: {getattr(owner, '__name__', owner)} has no {', '.join(missing)}; "
            "torchplug's host compile target needs updating for this torch"
        )


def _replace_everywhere(prefix: str, name: str, original: Callable[..., Any], replacement: Callable[..., Any]) -> None:
    """Swap a function in the module defining it and in every torch module that imported it by name."""
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith(prefix) and getattr(module, name, None) is original:
            setattr(module, name, replacement)
