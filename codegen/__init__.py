"""torchplug.codegen: each backend's torch.compile (Inductor) target.

A backend returns a `CodegenTarget` from `Backend.codegen()`: torch's own for native devices, the
shared host target (Inductor's C++ kernels on host memory) for emulated ones. Targets are armed at
autoload and installed on Inductor's first compile, never inside ``import torch``.
"""

from ..entrypoints.compile_target import CodegenTarget

__all__ = ["CodegenTarget", "arm"]


def arm(backend) -> None:
    """Install `backend`'s target (`backend.codegen()`) before Inductor's first compile."""
    from .entry import arm as _arm

    _arm(backend)

