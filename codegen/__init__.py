"""torchplug.codegen: each backend's torch.compile (Inductor) target.

A backend returns a `CodegenTarget` from `Backend.codegen()`. Targets are installed lazily, when
Inductor is first imported, never inside ``import torch``.
"""

from .target import CodegenTarget

__all__ = ["CodegenTarget"]
