"""DeviceProfile: what a backend's device is like, declared in its own folder and read by the core.

The runtime parts keep no table of device names: the emulated runtime names and sizes a device
from its profile, the collectives map its native library's name from it, the fidelity compile
mode generates Triton for its architecture, and GPU plugins launch the shared Triton kernels with
its launch configuration.
"""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EmulatedShape:
    """The shape of a plausible real device, which the emulated get_device_properties reports and
    Inductor's GPU heuristics read."""

    compute_units: int = 32  # SMs / compute units / Xe-cores / GPU cores: multi_processor_count
    warp_size: int = 32  # threads per warp / wavefront / sub-group
    arch: str = "generic"  # gcnArchName: read by Inductor's cache key whenever torch.version.cuda is None
    max_threads_per_compute_unit: int = 2048
    max_threads_per_block: int = 1024
    registers_per_compute_unit: int = 65536


@dataclass(frozen=True)
class TritonArch:
    """What Inductor generates Triton for in the fidelity compile mode (TORCHPLUG_EMULATE_INDUCTOR=triton)."""

    backend: str  # Triton's backend name: "cuda", "hip"
    arch: int | str  # 80 (sm_80), "gfx942", ...
    warp_size: int


@dataclass(frozen=True)
class DeviceProfile:
    label: str = ""  # human name in device names and notices, e.g. "NVIDIA CUDA GPU"; default: the backend name
    shape: EmulatedShape = EmulatedShape()
    # The torch.distributed backend torch uses for the device natively ("nccl", "xccl"): on an
    # emulated device that name (and torchplug's) runs torchplug's gloo-backed collectives.
    collectives: str | None = None
    # The version that library reports while emulated (torch.cuda.nccl.version() on emulated cuda and
    # rocm, on a torch build without it). The emulated rules are a recent library's (AVG, PREMUL_SUM,
    # fp8 reductions: NCCL 2.24+), so declare such a version.
    collectives_version: tuple[int, ...] | None = None
    fidelity: TritonArch | None = None  # None: no Triton fidelity mode for this device
    launch: Any = None  # the torchplug.kernels LaunchConfig its Triton kernels are launched with, if any
