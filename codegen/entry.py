"""When targets are installed: on Inductor's first compile, never inside ``import torch``.

Importing Inductor costs over a second and is circular while Dynamo loads, so nothing is done at
import. Instead, once Inductor's compile entry points exist, they are wrapped to install every
armed target before they run (so even the joint-graph passes see the registrations).
"""

import functools
import threading
from types import ModuleType
from typing import Any

from ..entrypoints.extensions import call
from .imports import after_import

_ENTRY_MODULE = "torch._inductor.compile_fx"
_ENTRY_POINTS = ("compile_fx", "compile_fx_inner")
_lock = threading.RLock()
_armed: list[Any] = []  # backends whose targets are not installed yet
_installed: set[str] = set()  # device types with an installed target
_refused: dict[str, str] = {}  # device type -> why its target cannot serve torch.compile here
_hooked = False
_streams_hooked = False


def arm(backend: Any) -> None:
    global _hooked, _streams_hooked
    emulated = call("device_mode", backend) == "emulated"
    with _lock:
        _armed.append(backend)
        hook_entry, _hooked = not _hooked, True
        # Only emulation runs several accelerator types in one process.
        hook_streams, _streams_hooked = emulated and not _streams_hooked, _streams_hooked or emulated
    if hook_entry:
        after_import(_ENTRY_MODULE, _wrap_entry_points, "torchplug's torch.compile targets")
    if emulated:
        from .fidelity import interpret_if_requested

        interpret_if_requested(backend)
    if hook_streams:
        from .patches import patch_dynamo_streams

        after_import("torch._dynamo", patch_dynamo_streams, "Dynamo's stream lookup for emulated devices")


def install_armed() -> None:
    with _lock:
        while _armed:
            backend = _armed.pop(0)
            target, device_type = backend.codegen(), backend.spec.device_type
            if target is None:
                continue
            if (reason := target.unavailable_reason()) is None:
                target.install()
                _installed.add(device_type)
                _refused.pop(device_type, None)
            elif device_type not in _installed:
                _refused[device_type] = reason


def refuse_untargeted(example_inputs: Any) -> None:
    """Raise, naming the device and why, when a graph's inputs live on a device whose target cannot serve
    (rather than let Inductor fail on a device type it has no registration for)."""
    import torch

    refused = sorted({t.device.type for t in example_inputs if isinstance(t, torch.Tensor)} & _refused.keys())
    if refused:
        raise RuntimeError(f"torchplug: torch.compile cannot generate code for the '{refused[0]}' device: "
                           f"{_refused[refused[0]]}")


def _wrap_entry_points(module: ModuleType) -> None:
    for name in _ENTRY_POINTS:
        original = getattr(module, name)

        @functools.wraps(original)
        def installs_targets_first(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            if _armed:
                install_armed()
            if __original.__name__ == "compile_fx" and len(args) > 1:
                from .host import compile_on_host

                refuse_untargeted(args[1])
                return compile_on_host(__original, *args, **kwargs)
            return __original(*args, **kwargs)

        setattr(module, name, installs_targets_first)
