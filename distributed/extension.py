"""The collectives extension: torch.distributed's usual backend names work on each emulated device.

Declared in torchplug's ``torchplug.extensions`` entry points; runs after emulation has attached.
"""

import os
from typing import Any

from ..entrypoints.extensions import BackendExtension


class Collectives(BackendExtension):
    order = 20

    def setup(self, backend: Any) -> None:
        if not os.environ.get("TORCHPLUG_EMULATE"):  # native devices keep torch's own collectives
            return
        from ..emulation import attached

        attachment = attached().get(backend.spec.device_type)
        if attachment is not None and attachment.backend == backend.spec.name:
            from . import serve

            profile = backend.spec.profile
            serve(attachment.device_type, attachment.dispatch_key, profile.collectives, profile.collectives_version)
