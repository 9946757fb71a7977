"""Run c10d collectives on torchplug's devices through their CPU kernels (gloo), on host tensors.

torch registers the c10d ops (c10d::allreduce_, ...) for the CPU, CUDA and PrivateUse1 keys only,
and each kernel asks the process group for the backend of its own device type. torchplug's devices
have no collective library of their own, so their collectives are the CPU collectives on host
tensors that stand for the device tensors. How those are made is the one difference between the
two kinds of device (a `Route`):

* an emulated device's tensors live in host memory: the host tensors are aliases over the same
  bytes, and gloo reads and writes the device memory in place, with no copies;
* a device with its own memory (a runtime the host cannot read) is staged: each device tensor is
  copied to a host tensor through the device's copies when the op is called, and the tensors the
  op writes are copied back when gloo's work completes, before its Work or future reports done.

One C++ kernel (csrc/host_route.cpp), registered for every c10d op under each such dispatch key,
does the translation:

* it checks, before any data moves, that every tensor is on the one device the op was called for
  (a CPU or other-device tensor is refused, as NCCL/XCCL refuse it) and that the group has a
  backend for that device type;
* it runs the op's CPU kernel on the host tensors (that kernel hands them to the group's CPU
  backend, gloo) and hands back the caller's device tensors;
* its Work completes with the device tensors, so futures (DDP's comm hooks, async_op=True) see
  the tensors they passed in, not host tensors (csrc/device_work.cpp).
"""

import atexit
import threading
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Route:
    """How the c10d ops of one device type reach gloo."""

    dispatch_key: str
    staged: bool  # through copies to host tensors and back (the device's own memory), or host aliases (host memory)


def install(device_type: str, route: Route) -> None:
    """Route every c10d op on the device type's dispatch key through its CPU kernel. Idempotent."""
    global _extension
    with _lock:
        if route.dispatch_key in _installed:
            return
        if _extension is None:
            _extension = build.load()
            atexit.register(settle)  # runs before the interpreter finalizes (csrc/device_work.cpp says why)
        for op in c10d_ops():
            _extension.route_through_host(op.name().partition("::")[2], device_type, route.dispatch_key, route.staged)
        _extension.register_host_timer(device_type)  # DDP times iterations per device type
        _installed.add(route.dispatch_key)


def follow_library(group: "torch.distributed.ProcessGroup", device_type: str, library: str) -> None:
    """Make `group`'s collectives on the emulated `device_type` follow `library`'s rules ("nccl",
    "xccl"; csrc/library_rules.cpp) for as long as the group lives. Call after install()."""
    torch.ops.torchplug_distributed.follow_library(group.boxed(), device_type, library)


def settle() -> None:
    """Wait until gloo's worker threads have let go of every device's collective work.

    Called before a group is destroyed and at exit, so that the last release of the work's tensors
    happens on a Python thread: if a worker thread did it while the interpreter finalizes, the
    process would abort after a successful run.
    """
    if _extension is not None:
        _extension.settle(_SETTLE_S)
