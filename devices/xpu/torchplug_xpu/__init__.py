"""torchplug-xpu: Intel GPUs through torch's XPU (SYCL) runtime."""

import torch

from types import MappingProxyType

from torchplug.entrypoints import (STANDARD_DTYPES, BackendSpec, DeviceProfile, TritonArch, declared_torch_range,
                                   torch_build_lacks)
from torchplug.kernels import KernelBackend, LaunchConfig, TritonKernels

from . import models

# Emulated, it answers as a Max 1550 by default, or another model by TORCHPLUG_EMULATE_GPU (models.py); XCCL natively. The fidelity mode generates the Triton that
# Inductor's CUDA path would (Intel's Triton backend is not in the public Triton). Intel's Triton
# backend defaults to sub-groups of 32 (its best for memory-bound kernels on Xe/Xe2) and allows 32
# of them per work-group; it renamed threads_per_warp to warp_size, so both are offered.
PROFILE = DeviceProfile(
    label="Intel XPU",
    shape=models.MAX_1550,
    models=models.OTHERS,
    collectives="xccl",
    fidelity=TritonArch("cuda", 80, 32),
    launch=LaunchConfig("xpu", warp_size=32, max_warps=32,
                        options=MappingProxyType({"warp_size": 32, "threads_per_warp": 32})),
)


class XpuBackend(KernelBackend):
    spec = BackendSpec(
        name="xpu", device_type="xpu", dispatch_key="XPU", dtypes=STANDARD_DTYPES,
        torch_range=declared_torch_range("torchplug-xpu"), profile=PROFILE,
    )
    kernels = TritonKernels("torchplug_xpu")  # torchplug.kernels' Triton source, launched as PROFILE.launch says

    def native_unavailable_reason(self) -> str | None:
        if not torch.xpu._is_compiled():
            return torch_build_lacks("XPU")
        if not torch.xpu.is_available():
            return "no Intel GPU is visible (torch.xpu.device_count() == 0)"
        return None


backend = XpuBackend()
