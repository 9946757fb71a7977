"""torchplug.kernels: a library of eager kernels in Triton that GPU plugins (cuda, rocm, xpu) register.

norms.py, activations.py and rotary.py hold the Triton source; launch.py what a launch
configuration is (each plugin declares its own, in its BackendSpec.profile.launch);
registration.py registers the kernels for one backend through torchplug.dispatcher, and
backend.py is the Backend base class of plugins that do. Importing this package does not import
Triton: the plugins use it at autoload.
"""

from typing import Any

from .. import warn
from .backend import KernelBackend
from .launch import LaunchConfig
from .registration import BackendKernels, TritonKernels

__all__ = ["BackendKernels", "KernelBackend", "LaunchConfig", "TritonKernels"]
_MOVED = {"CUDA": "cuda", "ROCM": "rocm", "XPU": "xpu"}  # launch configs that lived here before the profiles


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from ..entrypoints import loaded_backend

        backend = _MOVED[name]
        warn(f"torchplug.kernels.{name} is deprecated: use the plugin's own, "
             f"torchplug.entrypoints.loaded_backend({backend!r}).spec.profile.launch", DeprecationWarning)
        return loaded_backend(backend).spec.profile.launch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
