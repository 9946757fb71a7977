"""torch's own device types, as torch defines them: the one place torchplug's core names a device.

Every other part of the core asks this table (or the plugin's DeviceProfile) instead of comparing
device names: tests/test_core_names_no_device.py fails on an accelerator name anywhere else. An
entry holds what torch decides for that type, never what a plugin chooses: its dispatch key, its
c10::DeviceType number, how torch initialises it, which build of torch carries its runtime, and
which torch APIs exist for it. A device torch does not know takes the PrivateUse1 slot.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch


@dataclass(frozen=True)
class TorchDeviceType:
    name: str  # torch's device type, torch.device(name).type
    dispatch_key: str  # its dispatch key, which is also its c10::DeviceType name
    type_id: int  # its c10::DeviceType value: torch.Stream(device_type=...) takes it
    # Backend names -> build probe: whether this torch build carries that platform's runtime for the type
    # (a CUDA build and a ROCm build both serve "cuda"). Read when asked, never at import.
    builds: Mapping[str, Callable[[], bool]] = field(default_factory=dict)
    # torch's C++ calls torch.<name>._lazy_init() before the first tensor, so a Python hook sees the first use.
    lazy_init: bool = False
    # Without that hook ops reach the dispatcher directly: only a dispatcher fallback sees the first use, and
    # torch.backends.<name> asks the C++ hooks (which would fix them before an emulated runtime registers its own).
    first_use_in_dispatcher: bool = False
    # torch creates the type's accelerator hooks object during `import torch` (CUDAHooksInterface), so an
    # emulated runtime rebuilds it in place (csrc/hooks.cpp); other types' hooks are registered before first use.
    hooks_built_at_import: bool = False
    # A build without this runtime refuses UntypedStorage(device=...) and resize_ ("built without USE_CUDA").
    storages_need_runtime: bool = False
    # An emulated runtime may take a build's own one over where it sees no device (csrc/native_kernels.cpp);
    # for the others a build with the runtime rules emulation out (its kernels would shadow the emulator).
    runtime_replaceable: bool = False
    graphs: bool = False  # torch.<name>.graphs exists (capture and replay)
    # torch.<name>'s graph pool handle binding in torch._C, and the raw graph accessors its graph class has.
    graph_pool_handle: str = ""
    raw_graph_methods: tuple[str, ...] = ()
    capability: bool = False  # torch.<name>.get_device_capability() returns (major, minor)
    inductor: str = ""  # what torch's Inductor generates for the type: "triton", "metal", "cpp"; "" none
    # torch.<name> is torch.cuda's full API: the torch._C._cuda_* bindings, jiterator, NCCL's DDP hooks, and
    # the only type Inductor captures CUDA graphs for.
    cuda_api: bool = False

    def built(self) -> bool:
        """Whether this torch build carries a runtime of its own for the type (on any platform)."""
        return any(probe() for probe in self.builds.values())


CPU = TorchDeviceType("cpu", "CPU", 0, inductor="cpp")
CUDA = TorchDeviceType(
    "cuda", "CUDA", 1,
    builds={"cuda": lambda: bool(torch.version.cuda), "rocm": lambda: bool(torch.version.hip)},  # ROCm is cuda on HIP
    lazy_init=True, hooks_built_at_import=True, storages_need_runtime=True, runtime_replaceable=True, graphs=True,
    graph_pool_handle="_graph_pool_handle",
    raw_graph_methods=("raw_cuda_graph", "raw_cuda_graph_exec"), capability=True, inductor="triton", cuda_api=True,
)
XPU = TorchDeviceType(
    "xpu", "XPU", 12, builds={"xpu": lambda: torch.xpu._is_compiled()}, lazy_init=True, graphs=True,
    graph_pool_handle="_xpu_graph_pool_handle", raw_graph_methods=("raw_xpu_graph", "raw_xpu_graph_exec"),
    inductor="triton",
)
MPS = TorchDeviceType("mps", "MPS", 13, builds={"mps": lambda: torch.backends.mps.is_built()},
                      first_use_in_dispatcher=True, storages_need_runtime=True, inductor="metal")
MTIA = TorchDeviceType("mtia", "MTIA", 19, inductor="triton")
# The slot a device torch does not know takes; torch calls it "privateuseone" until it is renamed.
PRIVATEUSE1 = TorchDeviceType("privateuseone", "PrivateUse1", 20)

TORCH_DEVICE_TYPES: Mapping[str, TorchDeviceType] = MappingProxyType(
    {t.name: t for t in (CPU, CUDA, XPU, MPS, MTIA)})
_BY_KEY = MappingProxyType({t.dispatch_key: t for t in (*TORCH_DEVICE_TYPES.values(), PRIVATEUSE1)})


def torch_device_type(name: str) -> TorchDeviceType | None:
    """torch's own device type `name`, or None for a name torch does not know (it takes PrivateUse1)."""
    return TORCH_DEVICE_TYPES.get(name)


def by_dispatch_key(key: str) -> TorchDeviceType:
    """The device type of dispatch key `key` (PrivateUse1 included)."""
    return _BY_KEY[key]


def dispatch_key_of(device_type: str) -> str:
    """The dispatch key a device type's kernels register under: its own, or PrivateUse1 for a new name."""
    return (TORCH_DEVICE_TYPES.get(device_type) or PRIVATEUSE1).dispatch_key


def sharing_backends(device_type: str) -> tuple[str, ...]:
    """The backend names that serve one torch device type on different builds (cuda and rocm), or ()."""
    known = TORCH_DEVICE_TYPES.get(device_type)
    return tuple(known.builds) if known is not None and len(known.builds) > 1 else ()
