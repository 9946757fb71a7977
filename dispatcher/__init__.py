"""The dispatcher: kernel registry, routing by device key, governed fallback, coverage, trace.

Names load on first access: backends register kernels inside ``import torch``, which must not
pull in the rest.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "coverage_table": ("Coverage", "coverage"),
    "fallback": ("enable_fallback", "fallback_stats", "reset_fallback_stats", "set_fallback_policy"),
    "registry": ("Registration", "RegistrationError", "kernel", "register", "registrations", "resolve_schema",
                 "unregister", "when_torchplug_ops_defined"),
    "routes": ("Route", "route"),
    "result_check": ("KernelResultError",),
    "tracing": ("Trace", "TraceEvent", "trace"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
