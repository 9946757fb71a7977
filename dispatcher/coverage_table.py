"""Coverage: for every op torch registers (ATen and torchplug::), the route that serves it on a backend."""

import json
from collections import Counter
from dataclasses import dataclass, field

import torch

from ..entrypoints import loaded_backend
from .registry import registrations
from .routes import ROUTES, route


@dataclass(frozen=True)
class Coverage:
    backend: str
    dispatch_key: str
    routes: dict[str, str]  # op (with overload) -> route
    kernel_dtypes: dict[str, list[str]] = field(default_factory=dict)  # op -> dtypes of backend kernels

    def counts(self) -> dict[str, int]:
        counted = Counter(self.routes.values())
        return {name: counted.get(name, 0) for name in ROUTES}

    def summary(self) -> str:
        lines = [f"{self.backend} (dispatch key {self.dispatch_key}): {len(self.routes)} ops"]
        lines += [f"  {name:<9} {count:>5}" for name, count in self.counts().items()]
        lines += [f"  kernel    {op}: {', '.join(dtypes)}" for op, dtypes in sorted(self.kernel_dtypes.items())]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"backend": self.backend, "dispatch_key": self.dispatch_key, "counts": self.counts(),
                           "kernel_dtypes": self.kernel_dtypes, "routes": self.routes}, indent=2)


def coverage(backend: str) -> Coverage:
    from . import ops  # noqa: F401  -- the torchplug:: ops are part of every backend's surface

    key = loaded_backend(backend).spec.dispatch_key
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.split("::")[0] in ("aten", "torchplug")]
    kernel_dtypes: dict[str, set[str]] = {}
    for registration in registrations(backend):
        kernel_dtypes.setdefault(registration.op, set()).update(str(d) for d in registration.dtypes)
    return Coverage(backend, key, {op: route(op, backend, key) for op in sorted(names)},
                    {op: sorted(dtypes) for op, dtypes in kernel_dtypes.items()})
