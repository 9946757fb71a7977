"""CodegenTarget: what a backend tells torch.compile, and what `torchplug list` shows of it."""

from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass


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


@dataclass(frozen=True)
class HostLauncher:
    """How code torch.compile generates for the host runs on a device: the wrapper Inductor writes
    imports `name` from `module` and launches each host (C++) kernel as
    ``name(kernel, kernel_name, writes, *args)``, where `writes` are the indices of the arguments the
    kernel writes (None: unknown). A device whose memory the host reaches only inside its runtime's
    launch window runs the kernel there; an emulated device records it while a CUDA graph captures.

    `label` says where the kernels run, for `torchplug list` ("emulated", "launch_host").
    `unavailable_reason` is None when the device can run host kernels, else why not and the fix.
    """

    module: str
    name: str
    label: str
    unavailable_reason: str | None = None
