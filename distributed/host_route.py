"""Run c10d collectives on emulated devices through their CPU kernels, on host aliases.

torch registers the c10d ops (c10d::allreduce_, ...) for the CPU, CUDA and PrivateUse1 keys only,
and each kernel asks the process group for the backend of its own device type. An emulated
device's tensors live in host memory, so its collectives are the CPU collectives on host aliases
of those tensors: gloo reads and writes the device memory in place, with no copies. One kernel,
registered for every c10d op under each emulated dispatch key, does that translation:

* it checks every tensor is on the one emulated device the op was called for, before any data
  moves (a CPU or other-device tensor is refused, as NCCL/XCCL refuse it);
* it calls the op again with host aliases (which dispatches to the CPU kernel and to the process
  group's CPU backend, gloo) and hands back the caller's device tensors;
* its Work completes with the device tensors, so futures (DDP's comm hooks, async_op=True) see
  the tensors they passed in, not CPU aliases.
"""

import threading
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from . import uneven_allgather
from .host_alias import host_alias

_lock = threading.Lock()
_libraries: dict[str, torch.library.Library] = {}  # dispatch key -> its registrations (kept alive)


def c10d_ops() -> list[str]:
    """Every c10d op with a CPU kernel: the ones an emulated device can run through gloo."""
    ops = []
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, name = qualified.partition("::")
        if namespace == "c10d" and torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CPU"):
            ops.append(name)
    return sorted(ops)


def install(device_type: str, dispatch_key: str) -> None:
    """Route every c10d op on `dispatch_key` (an emulated device's key) through its CPU kernel. Idempotent."""
    with _lock:
        if dispatch_key in _libraries:
            return
        library = torch.library.Library("c10d", "IMPL")
        with warnings.catch_warnings():
            # CUDA and PrivateUse1 already have kernels that expect a real device runtime; on a build
            # without one (the only place devices are emulated) ours replace them, which torch warns about.
            warnings.simplefilter("ignore")
            for name in c10d_ops():
                op = getattr(torch.ops.c10d, name).default
                library.impl(name, _kernel(op, device_type), dispatch_key)
        _libraries[dispatch_key] = library


# Ops whose gloo kernel does less than NCCL's: run through a wrapper taking the same arguments.
_WIDENED = {"c10d::allgather_": uneven_allgather.allgather}


def _kernel(op: torch._ops.OpOverload, device_type: str):
    op_name = op.name()
    run = _WIDENED[op_name](op) if op_name in _WIDENED else op

    def run_on_host(*args: Any, **kwargs: Any) -> Any:
        _check_single_device(op_name, device_type, args, kwargs)
        to_device: dict[int, torch.Tensor] = {}  # id(host alias) -> the caller's tensor

        def alias(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                host = host_alias(value)
                to_device[id(host)] = value
                return host
            if isinstance(value, (list, tuple)):
                return type(value)(alias(v) for v in value)
            return value

        host_args = alias(args)
        host_kwargs = {k: alias(v) for k, v in kwargs.items()}
        result = run(*host_args, **host_kwargs)

        def back(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return to_device.get(id(value), value)
            if isinstance(value, (list, tuple)):
                return type(value)(back(v) for v in value)
            return value

        def finish(value: Any) -> Any:
            # The aliases stay referenced (by host_args, in the Work's closure) until the Work completes.
            return _device_work(value, back, (host_args, host_kwargs)) if _is_work(value) else back(value)

        return tuple(finish(v) for v in result) if isinstance(result, tuple) else finish(result)

    run_on_host.__name__ = f"torchplug_emulated_{op_name.replace('::', '_')}"
    return run_on_host


def _is_work(value: Any) -> bool:
    return isinstance(value, torch.ScriptObject) and value._type().qualified_name() == "__torch__.torch.classes.c10d.Work"


def _device_work(boxed: torch.ScriptObject, back, keep_alive: Any) -> torch.ScriptObject:
    """A Work that completes when gloo's does, with the caller's device tensors as its result."""
    work = dist.Work.unbox(boxed)
    try:
        future = work.get_future()
    except RuntimeError:  # send/recv works have no future: their wait() is all there is
        return boxed

    def on_device(done: torch.futures.Future) -> Any:
        _ = keep_alive  # the host aliases gloo is using: alive until it has finished with them
        return back(done.value())

    return _create_work_from_future(future.then(on_device)).boxed()


def _check_single_device(op_name: str, device_type: str, args: Any, kwargs: Any) -> None:
    """Raise, naming the op and the devices, unless every tensor argument is on one `device_type` device."""
    devices: dict[torch.device, None] = {}

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            devices[value.device] = None
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)

    visit(args)
    visit(kwargs)
    found = list(devices)
    if len(found) != 1 or found[0].type != device_type:
        names = ", ".join(str(d) for d in found)
        raise ValueError(
            f"{op_name} on the emulated '{device_type}' device got tensors on {names}: a collective takes "
            f"tensors on one {device_type} device only (as NCCL/XCCL do). Move them with .to('{device_type}') first."
        )
