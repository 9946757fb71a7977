"""The dispatcher: kernel registry, routing by device key, governed fallback, coverage, trace."""

from .coverage import Coverage, coverage
from .fallback import enable_fallback, fallback_stats, reset_fallback_stats, set_fallback_policy
from .registry import Registration, RegistrationError, kernel, register, registrations, resolve_schema
from .routes import Route, route
from .trace import Trace, TraceEvent, trace

__all__ = [
    "Coverage", "Registration", "RegistrationError", "Route", "Trace", "TraceEvent", "coverage", "enable_fallback",
    "fallback_stats", "kernel", "register", "registrations", "reset_fallback_stats", "resolve_schema", "route",
    "set_fallback_policy", "trace",
]
