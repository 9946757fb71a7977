"""Backend: the small class each device plugin subclasses."""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import torch

from .compile_target import CodegenTarget
from .device_status import DeviceStatus, Mode  # noqa: F401 -- Mode and DeviceStatus were defined here first
from .extensions import call
from .spec import BackendSpec


@dataclass(frozen=True)
class TunedSetting:
    """One setting `Backend.tune` measured: its name, the value that runs from now on, and how it was chosen."""

    setting: str
    value: str
    detail: str


class Backend:
    """One device backend. Subclasses set `spec` and implement `native_unavailable_reason`.

    Construction and `setup()` run inside ``import torch``: they must stay cheap. Availability is
    probed lazily, on first use, and never raises. torchplug's runtime parts (emulation,
    collectives, compile targets) act on a backend through the extension points (extensions.py).
    """

    spec: ClassVar[BackendSpec]

    def __init__(self) -> None:
        self._status: DeviceStatus | None = None

    def native_unavailable_reason(self) -> str | None:
        """None when torch's real runtime can drive this device here, else why it cannot."""
        raise NotImplementedError(f"{type(self).__name__} must implement native_unavailable_reason()")

    def setup(self) -> None:
        """Light registration work done at autoload. Heavy work waits for first use.

        Subclasses that override it call ``super().setup()``, which runs the extension point `setup`:
        the emulated runtime attaches (when the emulation settings list it), then collectives and
        the compile target are armed.
        """
        call("setup", self)

    def status(self) -> DeviceStatus:
        if self._status is None:
            self._status = call("status", self)
        if self._status is None:
            try:
                reason = self.native_unavailable_reason()
            except Exception as err:  # a probe must never break its caller
                reason = f"availability probe raised {type(err).__name__}: {err}"
            self._status = DeviceStatus("native") if reason is None else DeviceStatus("unavailable", reason)
        return self._status

    def codegen(self) -> CodegenTarget | None:
        """This backend's torch.compile target, or None when it has none (compile is unsupported).

        By default the one torchplug's codegen part chooses: torch's own when the device runs
        natively, torchplug's host target when it is emulated. A backend with its own Inductor
        codegen overrides this.
        """
        return call("codegen", self)

    def cpp_extensions(self) -> list[tuple[str, Callable[[], ModuleType]]]:
        """The C++ extensions this backend compiles on first use, in build order, as (name, build-or-load).

        `torchplug build NAME` builds them ahead of time (in a container image, before timing).
        """
        return []

    def tune(self) -> list[TunedSetting]:
        """Measure the settings this backend's kernels take from the machine, and record them where the
        next ``import torch`` finds them (`torchplug tune NAME`). Seconds of work, never run at autoload;
        [] when the backend measures nothing."""
        return []

    def reference_context(self) -> contextlib.AbstractContextManager:
        """Where the conformance suite computes its CPU reference: a backend that replaces torch's CPU
        kernels withdraws them here, so it is not held to itself."""
        return contextlib.nullcontext()

    def kernel_summary(self) -> str | None:
        """One line on the backend's own kernels for reports (e.g. the instruction set they run), or None."""
        return None

    def is_available(self) -> bool:
        return self.status().mode != "unavailable"

    def device(self, index: int | None = None) -> torch.device:
        return torch.device(self.spec.device_type, index)

    def smoke_test(self) -> str:
        """Run a tiny real op on the device; return what was checked, raise on a wrong result."""
        x = torch.arange(8, dtype=torch.float32, device=self.device())
        got = (x * 2 + 1).sum().item()
        if got != 64.0:
            raise AssertionError(f"(arange(8) * 2 + 1).sum() gave {got}, expected 64.0")
        return f"(arange(8) * 2 + 1).sum() == 64.0 on {x.device}"


def torch_build_lacks(feature: str) -> str:
    """The reason used when the installed torch was compiled without a device runtime."""
    return f"torch {torch.__version__} was built without {feature}"
