"""torchplug-xpu: Intel GPUs through torch's XPU (SYCL) runtime."""

import torch

from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec, DeviceStatus, torch_build_lacks
from torchplug.kernels import XPU, TritonKernels

# Tested on torch 2.13 and 2.11, emulated (no Intel GPU was at hand); 2.12 is untested.
TORCH_RANGE = ">=2.11,!=2.12.*,<2.14"


class XpuBackend(Backend):
    spec = BackendSpec(
        name="xpu", device_type="xpu", dispatch_key="XPU", dtypes=STANDARD_DTYPES, torch_range=TORCH_RANGE
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
