"""The dispatcher: kernel registry, routing by device key, governed fallback, coverage, trace.

Names load on first access: backends register kernels inside ``import torch``, which must not
pull in the rest.
"""

from ..lazy import lazy_exports

__all__, _MODULE_OF, __getattr__ = lazy_exports(__name__, {
    "coverage_table": ("Coverage", "coverage"),
    "fallback": ("enable_fallback", "fallback_stats", "reset_fallback_stats", "set_fallback_policy"),
    "ops_ready": ("when_torchplug_ops_defined",),
    "registry": ("Registration", "RegistrationError", "kernel", "register", "registrations", "resolve_schema",
                 "unregister"),
    "routes": ("Route", "route"),
    "result_check": ("KernelResultError",),
    "tracing": ("Trace", "TraceEvent", "trace"),
})


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
