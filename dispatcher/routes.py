"""Which implementation serves an op on a backend: the one question coverage and trace both ask."""

from typing import Literal

import torch

from .fallback import falls_back
from .registry import registrations, winner

Route = Literal["kernel", "native", "composite", "fallback", "missing"]
ROUTES: tuple[Route, ...] = ("kernel", "native", "composite", "fallback", "missing")
_COMPOSITE_EXPLICIT = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def route(op: str, backend: str, dispatch_key: str, dtype: torch.dtype | None = None) -> Route:
    """The route for `op` on `backend` (for `dtype`, or for any dtype when None).

    kernel: a torchplug backend kernel; native: torch's kernel for the dispatch key, or a
    backend-agnostic one; composite: torch decomposes the op into other ops; fallback: the
    dispatch key's backend fallback; missing: calling it raises.
    """
    registered = [r for r in registrations(backend) if r.op == op]
    if registered and (dtype is None or winner(op, backend, dtype) is not None):
        return "kernel"
    governed = falls_back(backend, op)
    if governed:
        return "fallback"
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(op, dispatch_key) or any(has(op, key) for key in _COMPOSITE_EXPLICIT):
        return "native"
    if has(op, "CompositeImplicitAutograd"):
        return "composite"
    if (torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.__members__[dispatch_key])
            and has(op, "CPU")):  # both fallbacks run the op's CPU kernel: without one, the call raises
        # A backend fallback that is not the governed one is the emulated runtime running the op.
        return "fallback" if governed is None else "native"
    return "missing"
