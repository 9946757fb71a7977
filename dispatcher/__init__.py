"""The dispatcher: kernel registry, routing by device key, governed fallback, coverage, trace."""

from .coverage import Coverage, coverage
from .registry import Registration, RegistrationError, kernel, register, registrations, resolve_schema
from .routes import Route, route
from .trace import Trace, TraceEvent, trace

__all__ = [
    "Coverage", "Registration", "RegistrationError", "Route", "Trace", "TraceEvent", "coverage", "kernel",
    "register", "registrations", "resolve_schema", "route", "trace",
]
