"""torchplug-mps: Apple GPUs through torch's Metal Performance Shaders runtime."""

import torch

from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec, DeviceStatus, declared_torch_range, torch_build_lacks

from .kernels import MetalKernels

# Metal has no 64-bit floating point.
MPS_DTYPES = STANDARD_DTYPES - {torch.float64, torch.complex128}


class MpsBackend(Backend):
    spec = BackendSpec(
        name="mps", device_type="mps", dispatch_key="MPS", dtypes=MPS_DTYPES,
        torch_range=declared_torch_range("torchplug-mps"),
    )
    kernels = MetalKernels("torchplug_mps")  # metal/*.metal, compiled with torch.mps.compile_shader

    def native_unavailable_reason(self) -> str | None:
        if not torch.backends.mps.is_built():
            return torch_build_lacks("MPS")
        if not torch.backends.mps.is_available():
            return "MPS is not available: it needs macOS 12.3+ on an Apple silicon or AMD GPU Mac"
        return None

    def setup(self) -> None:
        super().setup()
        self.kernels.register_when_ops_defined(self)

    def status(self) -> DeviceStatus:
        return self.kernels.annotate(super().status())  # says whether the Metal kernels serve, and why not


backend = MpsBackend()
