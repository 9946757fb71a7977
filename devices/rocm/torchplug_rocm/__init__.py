"""torchplug-rocm: AMD GPUs through torch's ROCm (HIP) runtime, which torch exposes as 'cuda'."""

import torch

from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec, torch_build_lacks


class RocmBackend(Backend):
    spec = BackendSpec(
        name="rocm", device_type="cuda", dispatch_key="CUDA", dtypes=STANDARD_DTYPES, torch_range=">=2.13,<2.14"
    )

    def native_unavailable_reason(self) -> str | None:
        if not torch.version.hip:
            return torch_build_lacks("ROCm (HIP)")
        if not torch.cuda.is_available():
            return "no ROCm GPU is visible (torch.cuda.device_count() == 0)"
        return None


backend = RocmBackend()
