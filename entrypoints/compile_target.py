"""CodegenTarget: what a backend tells torch.compile, and what `torchplug list` shows of it."""

from abc import ABC, abstractmethod
from collections.abc import Hashable


class CodegenTarget(ABC):
    """One backend's Inductor target in one mode (native Triton, emulated host C++, ...).

    `install()` is lazy and idempotent: it runs when Inductor is first imported, never at
    ``import torch``. `uuid()` joins Inductor's FX-graph cache key, so graphs compiled for another
    target (or another version of this one) are never reused.
    """

    name: str  # short label, e.g. "host-cpp", "torch-triton", "triton-interpreter"
    runs_kernels: bool = True  # False where the generated code cannot run on this machine (captured only)

    @abstractmethod
    def install(self) -> None: ...

    @abstractmethod
    def uuid(self) -> Hashable: ...

    def unavailable_reason(self) -> str | None:
        """None when torch.compile can target the device here, else why it cannot."""
        return None

    def status(self) -> str:
        """The line `torchplug list` prints, e.g. "inductor: host-cpp (emulated)"."""
        reason = self.unavailable_reason()
        return f"inductor: {self.name}" if reason is None else f"inductor: none — {reason}"
