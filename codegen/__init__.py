"""torchplug.codegen: each backend's torch.compile (Inductor) target.

A backend returns a `CodegenTarget` from `Backend.codegen()`: by default the codegen extension
(extension.py) picks torch's own for native devices and the shared host target (Inductor's C++
kernels on host memory) for emulated ones; a plugin may return its own choice, built on
`HostCppTarget` or `NativeTarget`. Targets are armed at autoload and installed on Inductor's first
compile, never inside ``import torch``.
"""

from ..entrypoints.compile_target import CodegenTarget
from .host import HostCppTarget
from .native import NativeTarget

__all__ = ["CodegenTarget", "HostCppTarget", "NativeTarget"]

