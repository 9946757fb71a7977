"""Run c10d collectives on emulated devices through their CPU kernels, on host aliases.

torch registers the c10d ops (c10d::allreduce_, ...) for the CPU, CUDA and PrivateUse1 keys only,
and each kernel asks the process group for the backend of its own device type. An emulated
device's tensors live in host memory, so its collectives are the CPU collectives on host aliases
of those tensors: gloo reads and writes the device memory in place, with no copies. One kernel,
registered for every c10d op under each emulated dispatch key, does that translation:

* it checks, before any data moves, that every tensor is on the one emulated device the op was
  called for (a CPU or other-device tensor is refused, as NCCL/XCCL refuse it) and that the group
  has a backend for that device type;
* it runs the op's CPU kernel on host aliases (that kernel hands them to the group's CPU backend,
  gloo) and hands back the caller's device tensors;
* its Work completes with the device tensors, so futures (DDP's comm hooks, async_op=True) see
  the tensors they passed in, not CPU aliases.
"""

import atexit
import functools
import threading
import warnings
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from . import build, peers, uneven_allgather
from .host_alias import host_alias

_WORK = "__torch__.torch.classes.c10d.Work"
_GROUP = "__torch__.torch.classes.c10d.ProcessGroup"
# Host aliases are CPU tensors: their op goes straight to its CPU kernel. (Calling the op afresh
# from Python would dispatch again, about 7x slower: 100 us a call instead of 14.)
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_lock = threading.Lock()
_libraries: dict[str, torch.library.Library] = {}  # dispatch key -> its registrations (kept alive)
_extension: ModuleType | None = None  # build.load(), kept: looking it up per call costs 25 us
# How long settle() waits for gloo's worker threads; only a collective stuck behind a dead peer takes it.
_SETTLE_S = 10.0


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
        if dispatch_key in _libraries:
            return
        if _extension is None:
            _extension = build.load()
            atexit.register(settle)  # runs before the interpreter finalizes (device_work.cpp says why)
        library = torch.library.Library("c10d", "IMPL")
        with warnings.catch_warnings():
            # CUDA and PrivateUse1 already have kernels that expect a real device runtime; on a build
            # without one (the only place devices are emulated) ours replace them, which torch warns about.
            warnings.simplefilter("ignore")
            for op in c10d_ops():
                library.impl(op.name().partition("::")[2], _kernel(op, device_type), dispatch_key)
        _libraries[dispatch_key] = library


# Ops whose gloo kernel does less than NCCL's: run through a wrapper taking the same arguments.
_WIDENED = {"c10d::allgather_": uneven_allgather.allgather}


def _kernel(op: torch._ops.OpOverload, device_type: str):
    op_name = op.name()
    on_cpu = functools.partial(op.redispatch, _CPU)
    run = _WIDENED[op_name](on_cpu) if op_name in _WIDENED else on_cpu

    def run_on_host(*args: Any, **kwargs: Any) -> Any:
        _check_single_device(op_name, device_type, args, kwargs)
        group = _group(args)
        _check_group_serves(op_name, device_type, group)
        aliases = _Aliases()
        result = run(*aliases.to_host(args), **aliases.to_host(kwargs))

        def finish(value: Any) -> Any:
            return _device_work(value, aliases, op_name, group) if _is_work(value) else aliases.to_device(value)

        return tuple(finish(v) for v in result) if isinstance(result, tuple) else finish(result)

    run_on_host.__name__ = f"torchplug_emulated_{op_name.replace('::', '_')}"
    return run_on_host


class _Aliases:
    """The host aliases of one call's device tensors. Holding it keeps them (and their memory) alive."""

    def __init__(self) -> None:
        self._device: dict[int, torch.Tensor] = {}  # id(host alias) -> the caller's tensor
        self._hosts: list[torch.Tensor] = []

    def pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(host aliases, the device tensors they alias), in the same order."""
        return self._hosts, [self._device[id(h)] for h in self._hosts]

    def to_host(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            host = host_alias(value)
            self._device[id(host)] = value
            self._hosts.append(host)
            return host
        if isinstance(value, (list, tuple)):
            return type(value)(self.to_host(v) for v in value)
        if isinstance(value, dict):
            return {k: self.to_host(v) for k, v in value.items()}
        return value

    def to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self._device.get(id(value), value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.to_device(v) for v in value)
        return value


def settle() -> None:
    """Wait until gloo's worker threads have let go of every emulated device's collective work.

    Called before a group is destroyed and at exit, so that the last release of the work's tensors
    happens on a Python thread: if a worker thread did it while the interpreter finalizes, the
    process would abort after a successful run.
    """
    if _extension is not None:
        _extension.settle(_SETTLE_S)


def _is_work(value: Any) -> bool:
    return isinstance(value, torch.ScriptObject) and value._type().qualified_name() == _WORK


def _group(args: tuple) -> dist.ProcessGroup:
    """The process group argument every c10d op takes."""
    return dist.ProcessGroup.unbox(
        next(a for a in args if isinstance(a, torch.ScriptObject) and a._type().qualified_name() == _GROUP)
    )


def _device_work(boxed: torch.ScriptObject, aliases: _Aliases, op_name: str,
                 group: dist.ProcessGroup) -> torch.ScriptObject:
    """gloo's Work, made to complete with the caller's device tensors and to name the rank that failed."""
    hosts, devices = aliases.pairs()
    return _extension.device_work(boxed, hosts, devices, op_name, group.group_name, group.rank())


def _check_single_device(op_name: str, device_type: str, args: Any, kwargs: Any) -> None:
    """Raise, naming the op and the devices, unless every tensor argument is on one `device_type` device."""
    devices: dict[torch.device, None] = {}

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            devices[value.device] = None
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            visit(list(value.values()))

    visit(args)
    visit(kwargs)
    found = list(devices)
    if len(found) != 1 or found[0].type != device_type:
        names = ", ".join(str(d) for d in found)
        raise ValueError(
            f"{op_name} on the emulated '{device_type}' device got tensors on {names}: a collective takes "
            f"tensors on one {device_type} device only (as NCCL/XCCL do). Move them with .to('{device_type}') first."
        )


def _check_group_serves(op_name: str, device_type: str, group: dist.ProcessGroup) -> None:
    """Refuse, before data moves, a group that has no backend for `device_type` (as torch does natively).

    The CPU kernel this op is routed through would otherwise run it on the group's CPU backend.
    """
    try:
        group._get_backend(torch.device(device_type))
    except RuntimeError:
        raise ValueError(
            f"{op_name} got {device_type} tensors, but process group {group.group_name!r} has no backend for "
            f"'{device_type}'. Create the group for this device: init_process_group() with no backend, or the "
            f"device's usual one (nccl for cuda, xccl for xpu), or e.g. 'cpu:gloo,{device_type}:torchplug'."
        ) from None
