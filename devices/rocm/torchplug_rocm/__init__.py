"""torchplug-rocm: AMD GPUs through torch's ROCm (HIP) runtime, which torch exposes as 'cuda'."""

import torch

from torchplug.entrypoints import (STANDARD_DTYPES, BackendSpec, DeviceProfile, TritonArch, declared_torch_range,
                                   torch_build_lacks)
from torchplug.kernels import KernelBackend, LaunchConfig, TritonKernels

from . import models

# Emulated, it answers as an MI300X by default, or another model by TORCHPLUG_EMULATE_GPU
# (models.py). torch names RCCL "nccl". Wavefronts of 64: blocks are multiples of 64 lanes, and a
# 1024-thread block is 16 wavefronts.
PROFILE = DeviceProfile(
    label="AMD ROCm GPU",
    shape=models.MI300X,
    models=models.OTHERS,
    collectives="nccl",
    collectives_version=(2, 27, 7),  # RCCL of ROCm 7.2
    fidelity=TritonArch("hip", "gfx942", 64),
    launch=LaunchConfig("rocm", warp_size=64, max_warps=16, elementwise_block=2048),
)


class RocmBackend(KernelBackend):
    spec = BackendSpec(
        name="rocm", device_type="cuda", dispatch_key="CUDA", dtypes=STANDARD_DTYPES,
        torch_range=declared_torch_range("torchplug-rocm"), profile=PROFILE,
    )
    kernels = TritonKernels("torchplug_rocm")  # torchplug.kernels' Triton source, launched as PROFILE.launch says

    def native_unavailable_reason(self) -> str | None:
        if not torch.version.hip:
            return torch_build_lacks("ROCm (HIP)")
        if not torch.cuda.is_available():
            return "no ROCm GPU is visible (torch.cuda.device_count() == 0)"
        return None


backend = RocmBackend()
