"""torchplug-vgpu: a GPU-like device that exists only emulated, described wholly by its own folder.

What the core would otherwise have to know about it is here: its label and emulated shape, the
name of its collective library, the launch configuration of its Triton kernels, and its
torch.compile target, which it chooses itself (tests/test_gpu_like_plugin.py).
"""

from torchplug.codegen import HostCppTarget
from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec, CodegenTarget, DeviceProfile, EmulatedShape
from torchplug.kernels import LaunchConfig

PROFILE = DeviceProfile(
    label="VGPU accelerator",
    shape=EmulatedShape(compute_units=48, warp_size=64, arch="vg1", max_threads_per_block=512),
    collectives="vccl",
    launch=LaunchConfig("vgpu", warp_size=64, max_warps=8),
)


class VgpuBackend(Backend):
    spec = BackendSpec(name="vgpu", device_type="vgpu", dispatch_key="PrivateUse1", dtypes=STANDARD_DTYPES,
                       torch_range=">=2.13,<2.16", profile=PROFILE)

    def native_unavailable_reason(self) -> str | None:
        return "there is no vgpu hardware: emulate it with TORCHPLUG_EMULATE=vgpu"

    def codegen(self) -> CodegenTarget | None:
        # Its own choice: Inductor's C++ kernels on the emulated device's host memory, named as its own.
        if self.status().mode != "emulated":
            return None
        return VgpuTarget(self.spec.device_type)


class VgpuTarget(HostCppTarget):
    name = "vgpu-host-cpp (emulated)"


backend = VgpuBackend()
