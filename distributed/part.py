"""The collectives runtime part (extension points): torch.distributed's usual backend names work on
each emulated device.

Declared in torchplug's ``torchplug.extensions`` entry points; runs after emulation has attached,
and asks the extension point `device_mode` whether the device is emulated.
"""

from typing import Any

from ..entrypoints import RuntimePart
from ..entrypoints.extensions import call


class Collectives(RuntimePart):
    after = ("emulation",)  # it asks whether the device is emulated

    def setup(self, backend: Any) -> None:
        if call("device_mode", backend) != "emulated":  # native devices keep torch's own collectives
            return
        from . import serve

        spec = backend.spec
        serve(spec.device_type, spec.dispatch_key, spec.profile.collectives, spec.profile.collectives_version)
