"""Which loaded backend provides a device type: the one a runtime part serves the device of."""

import functools
from typing import Any

from ..entrypoints.extensions import call
from ..entrypoints.loader import loaded, loaded_backend


@functools.cache
def providing(device_type: str) -> Any:
    """The loaded backend of `device_type` whose device a runtime part provides (it answers `device_module`):
    of two backends of one type (cuda, rocm), the one emulated or bound here. None if there is none."""
    return next((backend for backend in map(loaded_backend, loaded())
                 if backend.spec.device_type == device_type and call("device_module", backend) is not None), None)
