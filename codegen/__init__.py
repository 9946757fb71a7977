"""torchplug.codegen: each backend's torch.compile (Inductor) target.

A backend returns a `CodegenTarget` from `Backend.codegen()`: by default the codegen part
(part.py) picks torch's own for native devices and the shared host target (Inductor's C++
kernels on host memory) for emulated ones; a plugin may return its own choice, built on
`HostCppTarget` or `NativeTarget`. Targets are armed at autoload and installed on Inductor's first
compile, never inside ``import torch``.
"""

from ..entrypoints.compile_target import CodegenTarget
from ..lazy import lazy_exports

# The targets load on first access: the codegen part (part.py) is imported inside every
# ``import torch``.
_TARGETS, _MODULE_OF, __getattr__ = lazy_exports(__name__, {"host": ("HostCppTarget",), "native": ("NativeTarget",)})
__all__ = ["CodegenTarget", *_TARGETS]

