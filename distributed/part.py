"""The collectives runtime part (extension points): torch.distributed's usual backend names work on
each device torchplug provides, emulated or bound to its own runtime.

Declared in torchplug's ``torchplug.extensions`` entry points; runs after emulation has attached,
and asks the extension point `device_memory` where the device's memory is: the host's (emulated:
gloo works on host aliases of its tensors) or the device's own (its tensors are staged through the
device's copies).
"""

from typing import Any

from ..entrypoints import RuntimePart
from ..entrypoints.extensions import call


class Collectives(RuntimePart):
    after = ("emulation",)  # it asks where the emulated device's memory is

    def setup(self, backend: Any) -> None:
        memory = call("device_memory", backend)
        if memory is None:  # devices torch drives itself keep torch's own collectives
            return
        from . import serve

        spec = backend.spec
        serve(spec.device_type, spec.dispatch_key, spec.profile.collectives, spec.profile.collectives_version,
              staged=memory == "own")
