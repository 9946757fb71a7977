"""torchplug-mps's Metal kernels: sources in metal/, compiled at run time, registered under MPS.

metal_ops.py is their host side. They need a real Apple GPU: on an emulated mps device (host
memory) the CPU kernels emulation serves stay, and `torchplug list` says so.
"""

from collections.abc import Callable

from torchplug.entrypoints import Mode
from torchplug.kernels import BackendKernels


class MetalKernels(BackendKernels):
    kind = "metal"

    def unavailable_reason(self, mode: Mode) -> str | None:
        if mode == "unavailable":
            return "the device is unavailable"
        if mode == "emulated":
            return ("Metal kernels need a real Apple GPU: the emulated device keeps the CPU kernels "
                    "(see docs/gpu-kernels.md for what is verified where)")
        return None

    def prepare(self, mode: Mode) -> str:
        return "compiled on first use"

    def bind(self) -> dict[str, Callable]:
        from .metal_ops import OPS  # defines nothing at autoload: torchplug.ops exists by now

        return dict(OPS)
