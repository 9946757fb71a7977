"""Deprecated alias of `torchplug.dispatcher.cpp` (the dispatcher's C++ half), the name before "native"
came to mean only a device run by torch's own runtime."""

from .cpp import NAME, extension  # noqa: F401
