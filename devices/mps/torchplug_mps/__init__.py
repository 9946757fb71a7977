"""torchplug-mps: Apple GPUs through torch's Metal Performance Shaders runtime."""

import torch

from torchplug.entrypoints import STANDARD_DTYPES, BackendSpec, DeviceProfile, declared_torch_range, torch_build_lacks
from torchplug.kernels import KernelBackend

from . import models
from .kernels import MetalKernels

# Metal has no 64-bit floating point.
MPS_DTYPES = STANDARD_DTYPES - {torch.float64, torch.complex128}


# Emulated, it answers as an M1 Pro by default, or another model by TORCHPLUG_EMULATE_GPU (models.py).
# No collective library of its own (torch uses gloo) and no Triton: its compile target is Inductor's
# Metal codegen.
PROFILE = DeviceProfile(label="Apple MPS GPU", shape=models.M1_PRO, models=models.OTHERS)


class MpsBackend(KernelBackend):
    spec = BackendSpec(
        name="mps", device_type="mps", dispatch_key="MPS", dtypes=MPS_DTYPES,
        torch_range=declared_torch_range("torchplug-mps"), profile=PROFILE,
    )
    kernels = MetalKernels("torchplug_mps")  # metal/*.metal, compiled with torch.mps.compile_shader

    def native_unavailable_reason(self) -> str | None:
        if not torch.backends.mps.is_built():
            return torch_build_lacks("MPS")
        if not torch.backends.mps.is_available():
            return "MPS is not available: it needs macOS 12.3+ on an Apple silicon or AMD GPU Mac"
        return None


backend = MpsBackend()
