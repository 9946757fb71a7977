"""A vendor NPU plugin: a new device name, so it takes torch's PrivateUse1 dispatch key."""

import torch

from torchplug.entrypoints import Backend, BackendSpec, declared_torch_range

# Two dtypes are listed for torch's own sake. float64: torch's tensor printer converts to it on every
# device it does not know (it makes exceptions only for MPS, XPUs without fp64 and MAIA), so without
# it print(tensor) fails. uint8: torch moves storages as uint8 tensors (torch.load with map_location,
# Storage.to), so without it a checkpoint cannot be loaded onto the device.
NPU_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                        torch.uint8, torch.bool})


class NpuBackend(Backend):
    spec = BackendSpec(
        name="npu", device_type="npu", dispatch_key="PrivateUse1", dtypes=NPU_DTYPES,
        torch_range=declared_torch_range("torchplug-example"),  # the torch range in its pyproject.toml
    )

    def native_unavailable_reason(self) -> str | None:
        # This plugin binds no device runtime, so nothing could drive a real NPU: it is never native.
        # A device with its own runtime subclasses RuntimeBackend instead (docs/example-device).
        return "this example binds no device runtime; run it emulated with TORCHPLUG_EMULATE=npu"


backend = NpuBackend()
