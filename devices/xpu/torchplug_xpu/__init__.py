"""torchplug-xpu: Intel GPUs through torch's XPU (SYCL) runtime."""

import torch

from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec, torch_build_lacks


class XpuBackend(Backend):
    spec = BackendSpec(
        name="xpu", device_type="xpu", dispatch_key="XPU", dtypes=STANDARD_DTYPES, torch_range=">=2.13,<2.14"
    )

    def native_unavailable_reason(self) -> str | None:
        if not torch.xpu._is_compiled():
            return torch_build_lacks("XPU")
        if not torch.xpu.is_available():
            return "no Intel GPU is visible (torch.xpu.device_count() == 0)"
        return None


backend = XpuBackend()
