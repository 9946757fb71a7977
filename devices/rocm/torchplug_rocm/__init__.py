"""torchplug-rocm: AMD GPUs through torch's ROCm (HIP) runtime, which torch exposes as 'cuda'."""

import torch

from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec, DeviceStatus, declared_torch_range, torch_build_lacks
from torchplug.kernels import ROCM, TritonKernels


class RocmBackend(Backend):
    spec = BackendSpec(
        name="rocm", device_type="cuda", dispatch_key="CUDA", dtypes=STANDARD_DTYPES,
        torch_range=declared_torch_range("torchplug-rocm"),
    )
    kernels = TritonKernels("torchplug_rocm", ROCM)  # torchplug.kernels' Triton source, ROCM launch config

    def native_unavailable_reason(self) -> str | None:
        if not torch.version.hip:
            return torch_build_lacks("ROCm (HIP)")
        if not torch.cuda.is_available():
            return "no ROCm GPU is visible (torch.cuda.device_count() == 0)"
        return None

    def setup(self) -> None:
        super().setup()
        self.kernels.register_when_ops_defined(self)

    def status(self) -> DeviceStatus:
        return self.kernels.annotate(super().status())  # says whether the Triton kernels serve, and why not


backend = RocmBackend()
