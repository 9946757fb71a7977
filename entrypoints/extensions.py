"""Extension points: how torchplug's runtime parts serve every loaded backend.

The contract (`Backend`) imports none of them. Each part that acts on backends declares a
`BackendExtension` in its distribution's ``torchplug.extensions`` entry-point group (torchplug's own
pyproject.toml declares emulation, collectives, codegen and the dispatcher's fallback; another
distribution may add its own). `Backend` runs their hooks in `order`: at setup (inside ``import
torch``, so they stay cheap), when its status is asked and when its compile target is asked. The
loader runs `check_environment` once, when discovery is done, so a bad setting is named at ``import
torch``, not when it is first read.
"""

import threading
from collections.abc import Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, ClassVar

from .. import warn
from .compile_target import CodegenTarget
from .device_status import DeviceStatus

GROUP = "torchplug.extensions"


class BackendExtension:
    """Hooks one runtime part runs for each loaded backend; a hook that does not apply returns None."""

    order: ClassVar[int] = 100  # setup runs lowest first

    def setup(self, backend: Any) -> None:
        """At autoload, once per backend."""

    def check_environment(self, plugins: Sequence[str]) -> None:
        """Once per process, when discovery has loaded the plugins (inside ``import torch``): warn, at the
        user's line, about this part's environment variables that cannot be read or that name no
        installed plugin (`plugins` are the installed backend names). Never raises."""

    def status(self, backend: Any) -> DeviceStatus | None:
        """The backend's status when this part provides its device (e.g. emulated), else None."""
        return None

    def codegen(self, backend: Any) -> CodegenTarget | None:
        """The backend's torch.compile target when this part chooses it, else None."""
        return None


_lock = threading.Lock()
_declared: list[EntryPoint] | None = None
_loaded: list[BackendExtension] | None = None


def declare(points: Iterable[EntryPoint]) -> None:
    """The GROUP entry points found by the loader's one scan of the installed distributions."""
    global _declared
    with _lock:
        if _declared is None:
            _declared = list(points)


def extensions() -> list[BackendExtension]:
    """The declared extensions, instantiated once, in order. One that fails to load is skipped with a warning."""
    global _loaded
    with _lock:
        if _loaded is None:
            points = _declared if _declared is not None else list(entry_points(group=GROUP))
            found = []
            for point in sorted(points, key=lambda ep: ep.name):
                try:
                    extension = point.load()()
                    if not isinstance(extension, BackendExtension):
                        raise TypeError(f"{point.value} is not a torchplug BackendExtension")
                    found.append(extension)
                except Exception as err:  # never break `import torch`
                    warn(f"torchplug: extension {point.name!r} ({point.value}) failed to load and is off: "
                         f"{type(err).__name__}: {err}. Fix: reinstall the distribution that declares it")
            _loaded = sorted(found, key=lambda extension: extension.order)
        return _loaded
