"""torchplug-cuda: NVIDIA GPUs through torch's CUDA runtime.

The whole backend: its spec and availability probe (below); its eager kernels, torchplug.kernels'
Triton source registered under the CUDA key with the CUDA launch config (`kernels`); its
torch.compile target, from `Backend.codegen()` (torch's own Triton codegen natively, torchplug's
host target when emulated); and its expected conformance failures, conformance.toml beside this file.
"""

import torch

from torchplug.entrypoints import (STANDARD_DTYPES, BackendSpec, DeviceProfile, TritonArch, declared_torch_range,
                                   torch_build_lacks)
from torchplug.kernels import KernelBackend, LaunchConfig, TritonKernels

from . import models

# What the device is like. Emulated, it answers as an A100 by default, or another model by
# TORCHPLUG_EMULATE_GPU (models.py); natively, torch's own properties answer. "nccl" is the
# collective library torch uses for cuda; the fidelity compile mode generates Triton for sm_80; the
# Triton kernels launch in warps of 32, up to 16 per block (1024 threads).
PROFILE = DeviceProfile(
    label="NVIDIA CUDA GPU",
    shape=models.A100,
    models=models.OTHERS,
    collectives="nccl",
    collectives_version=(2, 30, 7),  # the NCCL of torch's CUDA 13 wheels
    fidelity=TritonArch("cuda", 80, 32),
    launch=LaunchConfig("cuda", warp_size=32, max_warps=16),
)


class CudaBackend(KernelBackend):
    spec = BackendSpec(
        name="cuda", device_type="cuda", dispatch_key="CUDA", dtypes=STANDARD_DTYPES,
        torch_range=declared_torch_range("torchplug-cuda"), profile=PROFILE,
    )
    kernels = TritonKernels("torchplug_cuda")  # torchplug.kernels' Triton source, launched as PROFILE.launch says

    def native_unavailable_reason(self) -> str | None:
        if torch.version.hip:
            return f"torch {torch.__version__} is a ROCm build: the rocm plugin drives its 'cuda' device"
        if not torch.version.cuda:
            return torch_build_lacks("CUDA")
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible (torch.cuda.device_count() == 0)"
        return None


backend = CudaBackend()
