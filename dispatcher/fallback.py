"""The governed CPU fallback: per backend and per op, allow, warn (once per op) or error; always counted.

    TORCHPLUG_FALLBACK=warn                 every backend (the default policy is warn)
    TORCHPLUG_FALLBACK=warn,xpu=error       a default, then per-backend policies
    TORCHPLUG_FALLBACK_OPS=aten::nonzero=allow,aten::unique=error   per op, on every backend

The fallback copies inputs to the CPU, runs torch's CPU kernel and copies results (and mutated
or out= arguments) back; view ops are refused, since a copy cannot alias device memory.
"""

import os
import threading
from collections.abc import Iterable, Sequence

from .. import warn
from ..entrypoints import loaded_backend
from ..entrypoints.loader import warn_unknown_names
from .cpp import extension
from .registry import qualified_name, ready_backend, resolve_schema

POLICIES = ("allow", "warn", "error")
_EXAMPLES = {"TORCHPLUG_FALLBACK": "TORCHPLUG_FALLBACK=warn,xpu=error",
             "TORCHPLUG_FALLBACK_OPS": "TORCHPLUG_FALLBACK_OPS=aten::nonzero=allow"}
_lock = threading.Lock()
_whole_key: set[str] = set()  # backends whose every kernel-less op falls back
_per_op: set[tuple[str, str]] = set()  # (backend, op) served by the fallback although a kernel exists
_configured: set[str] = set()  # backends whose environment policy was applied


def _check_policy(policy: str, origin: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"{origin}: fallback policy {policy!r} is not one of {', '.join(POLICIES)}")
    return policy


def _entries(variable: str) -> list[tuple[str, str, str]]:
    """(entry, what it names: backend or op, policy) for each comma-separated entry of `variable`."""
    entries = (entry.strip() for entry in os.environ.get(variable, "").split(","))
    return [(entry, *entry.rpartition("=")[::2]) for entry in entries if entry]


def _entry_problem(variable: str, entry: str) -> str | None:
    """What is wrong with one entry of TORCHPLUG_FALLBACK or TORCHPLUG_FALLBACK_OPS, with a valid example."""
    named, _, policy = entry.rpartition("=")
    if variable == "TORCHPLUG_FALLBACK_OPS" and not named:
        return f"{variable} entry {entry!r} must name an op and a policy; e.g. {_EXAMPLES[variable]}"
    if policy not in POLICIES:
        return (f"{variable} entry {entry!r}: fallback policy {policy!r} is not one of {', '.join(POLICIES)}; "
                f"e.g. {_EXAMPLES[variable]}")
    return None


def check_environment(plugins: Sequence[str]) -> None:
    """At ``import torch``: name each unreadable entry now, not when a device first falls back."""
    for variable in _EXAMPLES:
        for entry, named, _ in _entries(variable):
            if problem := _entry_problem(variable, entry):
                warn(f"{problem}. Until it is fixed, enabling the CPU fallback raises this error.")
            elif variable == "TORCHPLUG_FALLBACK" and named:
                warn_unknown_names(variable, [named], plugins, "warn,{name}=error")


def _env_policies(backend: str) -> list[tuple[str, str | None]]:
    """(policy, op or None) pairs that the environment sets for `backend`, in the order to apply."""
    pairs: list[tuple[str, str | None]] = []
    for variable in _EXAMPLES:
        for entry, named, policy in _entries(variable):
            if problem := _entry_problem(variable, entry):
                raise ValueError(problem)
            if variable == "TORCHPLUG_FALLBACK_OPS":
                resolve_schema(named)
                pairs.append((policy, named))
            elif named in ("", backend):
                pairs.append((policy, None))
    return pairs


def set_fallback_policy(backend: str, policy: str, ops: Iterable[str] | None = None) -> None:
    """Set `backend`'s fallback policy, for every op (ops=None) or for the listed ops."""
    _check_policy(policy, f"set_fallback_policy({backend!r})")
    loaded_backend(backend)
    for op in ops or [None]:
        if op is not None:
            resolve_schema(op)
        extension().set_fallback_policy(backend, policy, op)


def enable_fallback(backend: str, ops: Iterable[str] | None = None) -> None:
    """Serve `backend`'s ops through the governed fallback: every op without a kernel (ops=None),
    or the listed ops even where a kernel exists (an emulated device mirroring what its real
    device lacks)."""
    spec = ready_backend(backend).spec
    with _lock:
        if backend not in _configured:
            for policy, op in _env_policies(backend):
                extension().set_fallback_policy(backend, policy, op)
            _configured.add(backend)
        if ops is None:
            if backend not in _whole_key:
                extension().install_fallback_for_key(backend, spec.dispatch_key)
                _whole_key.add(backend)
            return
        for op in map(qualified_name, ops):
            resolve_schema(op)
            if (backend, op) not in _per_op:
                extension().install_fallback_for_op(backend, spec.dispatch_key, op)
                _per_op.add((backend, op))


def falls_back(backend: str, op: str) -> bool | None:
    """True if `op` on `backend` always takes the fallback, None if it does when it has no kernel."""
    if (backend, op) in _per_op:
        return True
    return None if backend in _whole_key else False


def fallback_stats() -> dict[str, dict[str, int]]:
    """How often each op fell back to the CPU, per backend."""
    return {backend: counts for backend, counts in extension().fallback_stats().items() if counts}


def reset_fallback_stats() -> None:
    """Zero the counts and re-arm the once-per-op warnings."""
    extension().reset_fallback_stats()
