"""Fallback as a verdict of its own: each case's route is `native`, `fallback` (it ran only through
the governed CPU fallback) or `illegal-fallback`.

The dispatcher counts every use of the governed fallback per backend and op (dispatcher/fallback.py);
a case's uses are the counts after it less the counts before. Some ops must never fall back, because
the copy to the CPU and back changes what they mean: a view (its result cannot alias device memory),
a factory (device memory made by host code and copied over), a random op (the CPU's generator draws,
not the device's), an in-place op (device memory written through a round trip), and any op the
backend's manifest declares native. A case that took such a route fails, whatever its values.
"""

import sys
from collections import Counter
from collections.abc import Iterable

from ..cases.case import CaseResult

ROUTES = ("native", "fallback", "illegal-fallback")


def uses(backend: str) -> Counter:
    """How often each op of `backend` fell back so far in this process."""
    if "torchplug.dispatcher.fallback" not in sys.modules:
        return Counter()  # nothing installed the governed fallback: nothing can have used it
    from ...dispatcher import fallback_stats

    return Counter(fallback_stats().get(backend, {}))


def why_illegal(op: str, native: Iterable[str] = ()) -> str | None:
    """Why `op` ("aten::zeros_like") must never take the CPU fallback, or None if it may."""
    if op in native:
        return "declared native by the backend's manifest"
    from ...dispatcher import resolve_schema

    schema = resolve_schema(op)
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return "a view op"
    if any(a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only for a in schema.arguments):
        return "an in-place op on device memory"
    if any("Generator" in str(a.type) for a in schema.arguments):
        return "a random op"
    if any(a.name == "device" for a in schema.arguments):
        return "a factory"
    return None


def judge(result: CaseResult, native: Iterable[str] = ()) -> CaseResult:
    """Set the case's route from the fallback uses the worker recorded; an illegal one fails the case."""
    if not result.fallback_ops:
        result.route = "native" if result.status in ("pass", "fail") else ""
        return result
    illegal = {op: why for op in sorted(result.fallback_ops) if (why := why_illegal(op, native))}
    if not illegal:
        result.route = "fallback"
        return result
    result.route = "illegal-fallback"
    reasons = "; ".join(f"{op} is {why}" for op, why in illegal.items())
    result.detail = f"illegal-fallback: {reasons}, and ran through the CPU fallback" + (
        f"; {result.detail}" if result.detail else "")
    if result.status == "pass":
        result.status = "fail"
    return result
