"""The device under test, as a worker process sees it: device, CPU reference and compile target."""

import contextlib
import platform
from collections.abc import Iterator
from typing import Any

import torch

from .modes import Target


def _compile_reason(backend: Any) -> str | None:
    codegen = backend.codegen()
    if codegen is None:
        return f"no Inductor target registered for '{backend.spec.device_type}'"
    return codegen.unavailable_reason()


@contextlib.contextmanager
def _stock_cpu_kernels() -> Iterator[None]:
    """torch's own CPU kernels: torchplug-cpu's registrations are withdrawn while the block runs."""
    from torchplug_cpu import kernels

    active = kernels.loaded()
    if active:
        kernels.unload()
    try:
        yield
    finally:
        if active:
            kernels.load(build=False)


def open_target(name: str) -> tuple[Target, dict[str, Any]]:
    """The Target for backend `name`, and what the report records about it."""
    import torchplug
    from torchplug.entrypoints import backend as find_backend

    backend = find_backend(name)
    status = backend.status()
    if status.mode == "unavailable":
        hint = f"; to check the emulated device: TORCHPLUG_EMULATE={name} torchplug check {name}"
        raise RuntimeError(f"backend '{name}' is unavailable here: {status.reason}{hint}")
    device = backend.device()
    on_cpu = device.type == "cpu"
    target = Target(name, device, _stock_cpu_kernels if on_cpu else contextlib.nullcontext, _compile_reason(backend),
                    frozenset(backend.spec.dtypes))
    codegen = backend.codegen()
    info = {
        "name": name, "device": str(device), "mode": status.mode, "status_reason": status.reason,
        "reference": "stock torch CPU kernels (torchplug-cpu's withdrawn) and float64" if on_cpu
        else "torch's CPU kernels and float64",
        "compile_reason": target.compile_reason,
        "codegen": codegen.status() if codegen is not None else f"inductor: none — {target.compile_reason}",
        "dtypes": sorted(str(d).removeprefix("torch.") for d in backend.spec.dtypes),
        "versions": {"torch": torch.__version__, "torchplug": torchplug.__version__,
                     "python": platform.python_version()},
        "isa": _isa(on_cpu),
    }
    return target, info


def _isa(on_cpu: bool) -> str:
    """The instruction-set path the kernels take: torch's CPU capability, and torchplug-cpu's path."""
    path = f"torch cpu capability {torch.backends.cpu.get_cpu_capability()}"
    if on_cpu:
        with contextlib.suppress(Exception):
            from torchplug_cpu import kernels

            if kernels.loaded():
                path += f"; torchplug-cpu {kernels.current_isa()}"
    return path
