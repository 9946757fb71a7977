"""The emulation extension: attaches the emulated runtime to the backends TORCHPLUG_EMULATE lists.

Declared in torchplug's ``torchplug.extensions`` entry points. Without the variable it only adds
the "torchplug can emulate this device" hint to torch's error, and imports nothing else.
"""

import os
from collections.abc import Sequence
from typing import Any

from ..entrypoints import STANDARD_DTYPES, DeviceStatus
from ..entrypoints.extensions import BackendExtension


class Emulation(BackendExtension):
    order = 10  # first: collectives and compile targets ask whether the device is emulated

    def setup(self, backend: Any) -> None:
        if os.environ.get("TORCHPLUG_EMULATE"):
            from .request import emulate_if_requested
            from .config import requested_names

            emulate_if_requested(backend, STANDARD_DTYPES - backend.spec.dtypes)
            if backend.spec.name in requested_names():
                return
        from .hint import hint_emulation

        hint_emulation(backend.spec.device_type, backend.spec.name)

    def check_environment(self, plugins: Sequence[str]) -> None:
        if os.environ.get("TORCHPLUG_EMULATE"):  # the other TORCHPLUG_EMULATE_* settings only act with it
            from .request import check_settings

            check_settings(plugins)

    def status(self, backend: Any) -> DeviceStatus | None:
        if not os.environ.get("TORCHPLUG_EMULATE"):
            return None
        from .request import status_for

        found = status_for(backend)  # emulated, or why the requested emulation is not possible, and the fix
        return None if found is None else DeviceStatus(*found)
