"""Run c10d collectives on emulated devices through their CPU kernels, on host aliases.

torch registers the c10d ops (c10d::allreduce_, ...) for the CPU, CUDA and PrivateUse1 keys only,
and each kernel asks the process group for the backend of its own device type. An emulated
device's tensors live in host memory, so its collectives are the CPU collectives on host aliases
of those tensors: gloo reads and writes the device memory in place, with no copies. One C++ kernel
(csrc/host_route.cpp), registered for every c10d op under each emulated dispatch key, does that
translation:

* it checks, before any data moves, that every tensor is on the one emulated device the op was
  called for (a CPU or other-device tensor is refused, as NCCL/XCCL refuse it) and that the group
  has a backend for that device type;
* it runs the op's CPU kernel on host aliases (that kernel hands them to the group's CPU backend,
  gloo) and hands back the caller's device tensors;
* its Work completes with the device tensors, so futures (DDP's comm hooks, async_op=True) see
  the tensors they passed in, not CPU aliases (csrc/device_work.cpp).
"""

import atexit
import threading
from types import ModuleType

import torch

from . import build, uneven_allgather  # noqa: F401 - defines the op the C++ route calls

_GROUP = "__torch__.torch.classes.c10d.ProcessGroup"
# How long settle() waits for gloo's worker threads; only a collective stuck behind a dead peer takes it.
_SETTLE_S = 10.0
_lock = threading.Lock()
_installed: set[str] = set()  # dispatch keys whose c10d ops are routed
_extension: ModuleType | None = None  # build.load()


def c10d_ops() -> list[torch._ops.OpOverload]:
    """The c10d collectives (ops taking a process group) that have a CPU kernel gloo can serve."""
    ops = []
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, name = qualified.partition("::")
        if namespace != "c10d" or not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CPU"):
            continue
        op = getattr(torch.ops.c10d, name).default
        if any(_GROUP in str(argument.type) for argument in op._schema.arguments):
            ops.append(op)
    return ops


def install(device_type: str, dispatch_key: str) -> None:
    """Route every c10d op on `dispatch_key` (an emulated device's key) through its CPU kernel. Idempotent."""
    global _extension
    with _lock:
        if dispatch_key in _installed:
            return
        if _extension is None:
            _extension = build.load()
            atexit.register(settle)  # runs before the interpreter finalizes (csrc/device_work.cpp says why)
        for op in c10d_ops():
            _extension.route_through_host(op.name().partition("::")[2], device_type, dispatch_key)
        _extension.register_host_timer(device_type)  # DDP times iterations per device type
        _installed.add(dispatch_key)


def follow_library(group: "torch.distributed.ProcessGroup", device_type: str, library: str) -> None:
    """Make `group`'s collectives on the emulated `device_type` follow `library`'s rules ("nccl",
    "xccl"; csrc/library_rules.cpp) for as long as the group lives. Call after install()."""
    torch.ops.torchplug_distributed.follow_library(group.boxed(), device_type, library)


def settle() -> None:
    """Wait until gloo's worker threads have let go of every emulated device's collective work.

    Called before a group is destroyed and at exit, so that the last release of the work's tensors
    happens on a Python thread: if a worker thread did it while the interpreter finalizes, the
    process would abort after a successful run.
    """
    if _extension is not None:
        _extension.settle(_SETTLE_S)
