"""The device under test, as a worker process sees it: device, CPU reference and compile target."""

import contextlib
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Target:
    """The device under test and the CPU reference it is held to."""

    backend: str
    device: torch.device
    reference: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    compile_reason: str | None = None  # why torch.compile cannot target the device, None if it can
    dtypes: frozenset[torch.dtype] = frozenset()  # the backend's BackendSpec.dtypes


def synchronize(target: Target) -> None:
    """Wait for the device's queued work, so that an asynchronous error (a GPU kernel's assert) is raised now."""
    module = getattr(torch, target.device.type, None)
    if hasattr(module, "synchronize"):
        module.synchronize()


def _compile_reason(backend: Any) -> str | None:
    codegen = backend.codegen()
    if codegen is None:
        return f"no Inductor target registered for '{backend.spec.device_type}'"
    return codegen.unavailable_reason()


def open_target(name: str) -> tuple[Target, dict[str, Any]]:
    """The Target for backend `name`, and what the report records about it."""
    import torchplug
    from torchplug.entrypoints import backend as find_backend

    backend = find_backend(name)
    status = backend.status()
    if status.mode == "unavailable":
        fix = status.fix or f"to check the emulated device: TORCHPLUG_EMULATE={name} torchplug check {name}"
        raise RuntimeError(f"backend '{name}' is unavailable here: {status.reason}; {fix}")
    device = backend.device()
    on_cpu = device.type == "cpu"
    target = Target(name, device, backend.reference_context, _compile_reason(backend), frozenset(backend.spec.dtypes))
    codegen = backend.codegen()
    info = {
        "name": name, "device": str(device), "mode": status.mode, "status_reason": status.reason,
        "dispatch_key": backend.spec.dispatch_key,
        "reference": f"stock torch CPU kernels ({name}'s withdrawn) and float64" if on_cpu
        else "torch's CPU kernels and float64",
        "compile_reason": target.compile_reason,
        "codegen": codegen.status() if codegen is not None else f"inductor: none — {target.compile_reason}",
        "dtypes": sorted(str(d).removeprefix("torch.") for d in backend.spec.dtypes),
        "versions": {"torch": torch.__version__, "torchplug": torchplug.__version__,
                     "python": platform.python_version()},
        "isa": _isa(backend),
    }
    return target, info


def _isa(backend: Any) -> str:
    """The instruction-set path the kernels take: torch's CPU capability, and the backend's own kernels'."""
    path = f"torch cpu capability {torch.backends.cpu.get_cpu_capability()}"
    with contextlib.suppress(Exception):  # a report line must not fail the run
        if summary := backend.kernel_summary():
            path += f"; {summary}"
    return path
