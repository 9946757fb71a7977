"""The example device: a new device, 'exdev', with its own runtime and memory the host cannot read.

Its runtime (runtime.c) implements torchplug's device-runtime contract in plain C; this file is all
the Python a vendor writes. torchplug binds the runtime to torch on first device use: allocator,
device guard, copies, torch.exdev, storages, serialization, and the CPU fallback for every op, which
stages through the runtime's copies.
"""

from pathlib import Path

import torch

from torchplug.entrypoints import BackendSpec, RuntimeBackend, declared_torch_range

from .build import runtime_library

# float64 for print(tensor), bool and uint8 for torch's own machinery (see docs/example-plugin).
EXDEV_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int16,
                          torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64})


class ExampleDevice(RuntimeBackend):
    spec = BackendSpec(
        name="exdev", device_type="exdev", dispatch_key="PrivateUse1", dtypes=EXDEV_DTYPES,
        torch_range=declared_torch_range("torchplug-example-device"),
    )
    fallback_policy = "allow"  # it has no kernels of its own: every op runs on the CPU, staged through copies

    def host_kernels(self) -> list[str]:
        # Its kernels: ops that write their input in place or draw random numbers run on the device itself
        # (torch's CPU kernel inside the runtime's launch window), never as a round trip through the CPU.
        return [name for schema in torch._C._jit_get_all_schemas() if _runs_on_device(schema)
                for name in [f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name]]

    def runtime_library(self) -> Path:
        return runtime_library()  # compiled with gcc on first use, then cached


def _runs_on_device(schema: torch._C.FunctionSchema) -> bool:
    if not schema.name.startswith("aten::") or "copy" in schema.name:  # copies cross devices: torchplug's own
        return False
    arguments = schema.arguments
    in_place = any(a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only for a in arguments)
    return in_place or any("Generator" in str(a.type) for a in arguments)


backend = ExampleDevice()
