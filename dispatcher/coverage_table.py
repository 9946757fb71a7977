"""Coverage: for every op torch registers (ATen and torchplug::), the route that serves it on a backend."""

import fnmatch
import json
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

import torch

from ..entrypoints import backend as usable_backend
from ..table import format_table
from .registry import ready_backend, registrations
from .routes import ROUTES, route


def matches(op: str, pattern: str) -> bool:
    """A glob (`aten::*pool*`) when it has wildcards, else a substring (`softmax`)."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(op, pattern)
    return pattern in op


@dataclass(frozen=True)
class Coverage:
    backend: str
    dispatch_key: str
    routes: dict[str, str]  # op (with overload) -> route
    kernel_dtypes: dict[str, list[str]] = field(default_factory=dict)  # op -> dtypes of backend kernels

    def counts(self) -> dict[str, int]:
        counted = Counter(self.routes.values())
        return {name: counted.get(name, 0) for name in ROUTES}

    def select(self, routes: Collection[str] = (), pattern: str | None = None) -> dict[str, str]:
        """The ops whose route is one of `routes` (any when empty) and whose name matches `pattern`."""
        return {op: r for op, r in self.routes.items()
                if (not routes or r in routes) and (pattern is None or matches(op, pattern))}

    def summary(self) -> str:
        lines = [f"{self.backend} (dispatch key {self.dispatch_key}): {len(self.routes)} ops"]
        lines += [f"  {name:<9} {count:>5}" for name, count in self.counts().items()]
        lines += [f"  kernel    {op}: {', '.join(dtypes)}" for op, dtypes in sorted(self.kernel_dtypes.items())]
        return "\n".join(lines)

    def listing(self, routes: Collection[str] = (), pattern: str | None = None) -> str:
        """One line per selected op: its name, its route, and the dtypes a backend kernel serves."""
        rows = [(op, r, ", ".join(self.kernel_dtypes.get(op, ()))) for op, r in self.select(routes, pattern).items()]
        return format_table(("OP", "ROUTE", "KERNEL DTYPES"), rows)

    def compare(self, other: "Coverage", routes: Collection[str] = (), pattern: str | None = None,
                differing: bool = False) -> str:
        """The selected ops side by side with their routes on `other` (only those that differ, if asked).

        `routes` selects ops whose route on either backend is one of them.
        """
        ops = sorted(set(self.select(routes, pattern)) | set(other.select(routes, pattern)))
        rows = [(op, self.routes.get(op, "-"), other.routes.get(op, "-")) for op in ops]
        if differing:
            rows = [row for row in rows if row[1] != row[2]]
        return format_table(("OP", self.backend.upper(), other.backend.upper()), rows)

    def to_json(self) -> str:
        return json.dumps({"backend": self.backend, "dispatch_key": self.dispatch_key, "counts": self.counts(),
                           "kernel_dtypes": self.kernel_dtypes, "routes": self.routes}, indent=2)


def coverage(backend: str) -> Coverage:
    """The route of every op on `backend`'s device.

    Raises PluginError (naming the reason and the fix) when the device is unavailable here: it has
    no routes. An emulated device's runtime is started first, since its fallback serves the ops
    that have no kernel of their own; the answer must not depend on whether a tensor was made yet.
    """
    from . import ops  # noqa: F401  -- the torchplug:: ops are part of every backend's surface

    usable_backend(backend)
    key = ready_backend(backend).spec.dispatch_key
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.split("::")[0] in ("aten", "torchplug")]
    kernel_dtypes: dict[str, set[str]] = {}
    for registration in registrations(backend):
        kernel_dtypes.setdefault(registration.op, set()).update(str(d) for d in registration.dtypes)
    return Coverage(backend, key, {op: route(op, backend, key) for op in sorted(names)},
                    {op: sorted(dtypes) for op, dtypes in kernel_dtypes.items()})
