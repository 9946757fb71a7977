"""DeviceProfile: what a backend's device is like, declared in its own folder and read by the core.

The runtime parts keep no table of device names: the emulated runtime names and sizes a device
from its profile, the collectives map its native library's name from it, the fidelity compile
mode generates Triton for its architecture, and GPU plugins launch the shared Triton kernels with
its launch configuration.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class LaunchConfig:
    """How a GPU backend sizes the blocks and warps of torchplug.kernels' Triton kernels (which apply it,
    kernels/launch.py): the source is the same for every backend, the hardware's unit of execution is
    not. NVIDIA runs warps of 32 threads, AMD wavefronts of 64 (a block narrower than a wavefront
    leaves lanes idle), Intel GPUs sub-groups of 16 or 32 with up to 1024 work-items per work-group."""

    name: str  # the backend it is for, e.g. "cuda"
    warp_size: int  # threads per warp / wavefront / sub-group
    max_warps: int  # warps per program (block): 1024 threads on all three
    vector_bytes: int = 16  # bytes one thread loads at a time: 128-bit accesses
    max_row_block: int = 16384  # longest row a normalisation holds in registers; longer rows loop
    elementwise_block: int = 1024  # elements per program for elementwise kernels
    # Backend compiler options, passed only where the active Triton backend declares them
    # (Intel renamed threads_per_warp to warp_size; passing an unknown option is an error).
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def row_block(self, n: int) -> int:
        """Block for one row of `n` elements: the whole row when it fits, never narrower than a warp."""
        return max(self.warp_size, min(next_power_of_2(max(n, 1)), self.max_row_block))

    def num_warps(self, block: int, element_bytes: int) -> int:
        """Enough warps that each thread moves about one vector of the block, as a power of two."""
        per_warp = self.warp_size * max(1, self.vector_bytes // element_bytes)
        warps = next_power_of_2(max(1, block // per_warp))
        return min(warps, self.max_warps)


@dataclass(frozen=True)
class EmulatedShape:
    """A real device model the emulated device answers as: what get_device_properties, the
    capability and the architecture list report, and what Inductor's GPU heuristics read.

    Code picks bf16, TF32, flash attention or a kernel by these answers, so an emulated device
    must give those of one real model, consistently and before any tensor exists. The device
    name still says it is emulated.
    """

    compute_units: int = 32  # SMs / compute units / Xe-cores / GPU cores: multi_processor_count
    warp_size: int = 32  # threads per warp / wavefront / sub-group
    arch: str = "generic"  # gcnArchName: read by Inductor's cache key whenever torch.version.cuda is None
    max_threads_per_compute_unit: int = 2048
    max_threads_per_block: int = 1024
    registers_per_compute_unit: int = 65536
    # What torch.cuda.get_arch_list() reports on a torch without a CUDA runtime (a build with one
    # reports its own): the architectures a torch build that runs this model is compiled for.
    arch_list: tuple[str, ...] = ()
    model: str = ""  # the short name TORCHPLUG_EMULATE_GPU selects it by, e.g. "a100"
    name: str = ""  # the product name, e.g. "NVIDIA A100-SXM4-80GB"; default: the profile's label
    capability: tuple[int, int] = (0, 0)  # (major, minor): CUDA's compute capability, ROCm's gfx version
    memory: int = 0  # bytes of device memory reported (total_memory), unless TORCHPLUG_EMULATE_MEMORY caps it
    l2_cache_bytes: int = 0
    shared_memory_per_block: int = 49152  # without opting in; shared_memory_per_block_optin is the most a kernel can ask
    shared_memory_per_block_optin: int = 49152


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
    launch: LaunchConfig | None = None  # how torchplug.kernels' Triton kernels launch on it (written here only)
    # Other models the emulated device can be, by TORCHPLUG_EMULATE_GPU=<model>; `shape` is the default.
    models: tuple[EmulatedShape, ...] = ()

    def model(self, name: str) -> EmulatedShape | None:
        """The shape called `name` (the default one included), or None."""
        return next((shape for shape in (self.shape, *self.models) if shape.model == name), None)

    def model_names(self) -> list[str]:
        return [shape.model for shape in (self.shape, *self.models) if shape.model]
