"""torchplug.kernels: eager kernels in Triton, shared by the GPU backends (cuda, rocm, xpu).

norms.py, activations.py and rotary.py hold the Triton source; launch.py each backend's launch
configuration; registration.py registers them for one backend through torchplug.dispatcher.
Importing this package does not import Triton: the plugins use it at autoload.
"""

from .launch import CUDA, ROCM, XPU, LaunchConfig
from .registration import BackendKernels, TritonKernels

__all__ = ["CUDA", "ROCM", "XPU", "BackendKernels", "LaunchConfig", "TritonKernels"]
