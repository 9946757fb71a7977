"""Which device `torchplug check NAME` holds to the CPU: the real one where it works here, else an emulated one.

Decided in the parent before anything slow starts, so that a device that can be neither used nor
emulated is refused in the time `import torch` takes, not after the workers and the OpInfo database.
"""

import os

from ...entrypoints import PluginError, loaded_backend
from ...entrypoints.loader import backend as usable_backend

# A capacity, so the OOM runtime check has something to exhaust (the smoke cases use a few MiB).
DEFAULT_MEMORY = "8GiB"


def worker_settings(name: str, *, native_only: bool = False) -> tuple[dict[str, str], str | None]:
    """The settings the workers need to run backend `name`, and a line saying it is emulated (None: native).

    A device that is unavailable here is emulated in host memory, as `TORCHPLUG_EMULATE=NAME` would
    (native hardware always wins), unless `native_only` or the user's own TORCHPLUG_EMULATE already
    asked for it and was refused. Raises PluginError with the reason and the fix where the device
    cannot be used.
    """
    from ...emulation.request import emulation_refused
    from ...emulation.config import VARIABLE, requested_names

    status = loaded_backend(name).status()
    if native_only and status.mode == "emulated":
        raise PluginError(f"torchplug device {name!r} is emulated here ({status.reason}), and --native asks for "
                          f"the real device. Fix: run without --native, or unset TORCHPLUG_EMULATE where the hardware is")
    if status.mode != "unavailable":
        return {}, None
    if native_only:
        raise PluginError(f"torchplug device {name!r} is not here ({status.reason}), and --native asks for the real "
                          f"device. Fix: run where the hardware and a torch build for it are present, or drop --native "
                          f"to check an emulated {name}")
    if name in requested_names():  # the user's own emulation of it was refused
        usable_backend(name)  # raises, with the reason and the fix
    settings = {VARIABLE: name,
                "TORCHPLUG_EMULATE_MEMORY": os.environ.get("TORCHPLUG_EMULATE_MEMORY") or DEFAULT_MEMORY}
    if refused := emulation_refused(loaded_backend(name), {**os.environ, **settings}):
        why, fix = refused
        raise PluginError(f"torchplug device {name!r} is unavailable: {status.reason}; nor can it be emulated here: "
                          f"{why}. Fix: {fix}.")
    return settings, (f"torchplug check: no {name} device here ({status.reason}): checking an emulated {name} "
                      f"in host memory, as TORCHPLUG_EMULATE={name} does (--native refuses instead)")
