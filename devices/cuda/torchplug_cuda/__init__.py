"""torchplug-cuda: NVIDIA GPUs through torch's CUDA runtime.

The whole backend: its spec and availability probe (below); its eager kernels, torchplug.kernels'
Triton source registered under the CUDA key with the CUDA launch config (`kernels`); its
torch.compile target, from `Backend.codegen()` (torch's own Triton codegen natively, torchplug's
host target when emulated); and its expected conformance failures, conformance.toml beside this file.
"""

import torch

from torchplug.entrypoints import (STANDARD_DTYPES, Backend, BackendSpec, DeviceStatus, declared_torch_range,
                                   torch_build_lacks)
from torchplug.kernels import CUDA, TritonKernels


class CudaBackend(Backend):
    spec = BackendSpec(
        name="cuda", device_type="cuda", dispatch_key="CUDA", dtypes=STANDARD_DTYPES,
        torch_range=declared_torch_range("torchplug-cuda"),
    )
    kernels = TritonKernels("torchplug_cuda", CUDA)  # torchplug.kernels' Triton source, CUDA launch config

    def native_unavailable_reason(self) -> str | None:
        if torch.version.hip:
            return f"torch {torch.__version__} is a ROCm build: the rocm plugin drives its 'cuda' device"
        if not torch.version.cuda:
            return torch_build_lacks("CUDA")
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible (torch.cuda.device_count() == 0)"
        return None

    def setup(self) -> None:
        super().setup()
        self.kernels.register_when_ops_defined(self)

    def status(self) -> DeviceStatus:
        return self.kernels.annotate(super().status())  # says whether the Triton kernels serve, and why not


backend = CudaBackend()
