"""Fidelity mode for emulated mps: Inductor's Metal codegen runs, and the Metal source is kept.

With TORCHPLUG_EMULATE_INDUCTOR=triton, emulated mps gets Inductor's Metal codegen (the one a Mac
uses). Metal compiles and runs only on macOS, so the check here is that codegen succeeds: each
library's source is written to a file, and calling the compiled graph raises an error naming it.
"""

import hashlib
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from .host_memory import HostMemoryTarget

VERSION = 1
captured: list[Path] = []  # the Metal sources kept in this process, in order


class MetalCaptureTarget(HostMemoryTarget):
    name = "metal-capture (emulated; codegen only, Metal cannot run here)"
    runs_kernels = False

    def uuid(self) -> Hashable:
        from .wrapper import source_digest

        return ("torchplug-metal-capture", VERSION, source_digest())

    def prepare(self, module: Any) -> tuple[Any, Any, Any]:
        from torch._inductor.codegen.mps import MetalScheduling
        from torch._inductor.runtime import runtime_utils

        from .device_interface import register_interface
        from .patches import replace_metal_compiler
        from .wrapper import interpreted_wrapper

        register_interface(module, self.refused_dtypes())
        replace_metal_compiler(runtime_utils, capture_metal_source)
        return MetalScheduling, interpreted_wrapper(self.launcher()), None


def capture_metal_source(source: str) -> Any:
    """Stands in for torch.mps.compile_shader: keeps `source` in a file, returns kernels that say where."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    folder = Path(cache_dir()) / "torchplug-metal"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(source.encode()).hexdigest()[:16]}.metal"
    path.write_text(source)
    captured.append(path)
    return _CapturedLibrary(path)


class _CapturedLibrary:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __getattr__(self, kernel: str) -> Any:
        def cannot_run(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError(
                f"Metal kernel {kernel!r} was generated for the emulated mps device but cannot run here: Metal "
                f"compiles and runs only on macOS. Its source is kept at {self.path}. Unset "
                "TORCHPLUG_EMULATE_INDUCTOR to run compiled graphs on emulated mps (host C++ kernels)."
            )

        return cannot_run
