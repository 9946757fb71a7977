"""torchplug-xpu: Intel GPUs through torch's XPU (SYCL) runtime."""

import torch

from torchplug.entrypoints import (STANDARD_DTYPES, Backend, BackendSpec, DeviceStatus, declared_torch_range,
                                   torch_build_lacks)
from torchplug.kernels import XPU, TritonKernels


class XpuBackend(Backend):
    spec = BackendSpec(
        name="xpu", device_type="xpu", dispatch_key="XPU", dtypes=STANDARD_DTYPES,
        torch_range=declared_torch_range("torchplug-xpu"),
    )
    kernels = TritonKernels("torchplug_xpu", XPU)  # torchplug.kernels' Triton source, XPU launch config

    def native_unavailable_reason(self) -> str | None:
        if not torch.xpu._is_compiled():
            return torch_build_lacks("XPU")
        if not torch.xpu.is_available():
            return "no Intel GPU is visible (torch.xpu.device_count() == 0)"
        return None

    def setup(self) -> None:
        super().setup()
        self.kernels.register_when_ops_defined(self)

    def status(self) -> DeviceStatus:
        return self.kernels.annotate(super().status())  # says whether the Triton kernels serve, and why not


backend = XpuBackend()
