"""dispatcher.trace(): record every op on torchplug devices with its route and duration.

It is a TorchDispatchMode, so it costs nothing when no trace is active. Durations are host wall
time around the call: on asynchronous devices that is launch time.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..entrypoints import records
from ..table import format_table
from .registry import qualified_name, winner
from .routes import route


@dataclass(frozen=True)
class TraceEvent:
    op: str
    device: str
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    route: str
    duration_us: float
    served_by: str = ""  # for the kernel route, the registration's label, e.g. "torchplug_cuda triton kernel"


@dataclass
class Trace:
    events: list[TraceEvent] = field(default_factory=list)

    def table(self) -> str:
        return format_table(("op", "device", "dtypes", "shapes", "route", "served by", "time (us)"),
                            [(e.op, e.device, ",".join(e.dtypes), " ".join(str(list(s)) for s in e.shapes), e.route,
                              e.served_by, f"{e.duration_us:.1f}") for e in self.events])


def _backends_by_device_type() -> dict[str, tuple[str, str]]:
    """device type -> (backend name, dispatch key) for the loaded backends whose device is usable."""
    found = {}
    for record in records():
        if record.backend is not None and record.backend.is_available():
            spec = record.backend.spec
            found.setdefault(spec.device_type, (spec.name, spec.dispatch_key))
    return found


class _TraceMode(TorchDispatchMode):
    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace
        self.backends = _backends_by_device_type()
        # (route, served by) per (op, backend, dtype): registrations do not change mid-trace
        self.routes: dict[tuple[str, str, torch.dtype], tuple[str, str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        start = time.perf_counter()
        out = func(*args, **kwargs)
        elapsed = (time.perf_counter() - start) * 1e6
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        # Factory ops (torch.empty, randn, ...) have no tensor inputs: their output names the device.
        tensors = inputs or [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        served = self.backends.get(tensors[0].device.type) if tensors else None
        if served is not None:
            op, dtype = qualified_name(func), tensors[0].dtype
            key = (op, served[0], dtype)
            if key not in self.routes:
                found = route(op, *served, dtype)
                chosen = winner(op, served[0], dtype) if found == "kernel" else None
                self.routes[key] = found, chosen.label if chosen else ""
            how, served_by = self.routes[key]
            self.trace.events.append(TraceEvent(
                op, str(tensors[0].device), tuple(str(t.dtype).removeprefix("torch.") for t in tensors),
                tuple(tuple(t.shape) for t in tensors), how, elapsed, served_by))
        return out


@contextmanager
def trace() -> Iterator[Trace]:
    """Record the ops run inside the block on torchplug devices: `with dispatcher.trace() as t:`."""
    recorded = Trace()
    with _TraceMode(recorded):
        yield recorded
