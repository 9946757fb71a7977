"""Backend: the small class each device plugin subclasses."""

import os
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from ..codegen import CodegenTarget
from .spec import STANDARD_DTYPES, BackendSpec

Mode = Literal["native", "emulated", "unavailable"]


@dataclass(frozen=True)
class DeviceStatus:
    mode: Mode
    reason: str = ""  # why the device is unavailable, or how it is provided


class Backend:
    """One device backend. Subclasses set `spec` and implement `native_unavailable_reason`.

    Construction and `setup()` run inside ``import torch``: they must stay cheap. Availability is
    probed lazily, on first use, and never raises.
    """

    spec: ClassVar[BackendSpec]

    def __init__(self) -> None:
        self._status: DeviceStatus | None = None

    def native_unavailable_reason(self) -> str | None:
        """None when torch's real runtime can drive this device here, else why it cannot."""
        raise NotImplementedError(f"{type(self).__name__} must implement native_unavailable_reason()")

    def setup(self) -> None:
        """Light registration work done at autoload. Heavy work waits for first use.

        Subclasses that override it call ``super().setup()``, which attaches the emulated runtime.
        """
        self._setup_emulation()
        from ..codegen import arm

        arm(self)

    def _setup_emulation(self) -> None:
        # Opt-in only: a backend not listed in TORCHPLUG_EMULATE is not emulated (and without the
        # variable the emulation package is not even imported); if its device's runtime is absent
        # from this torch, torch's error for it only gains a hint (hint.py).
        if os.environ.get("TORCHPLUG_EMULATE"):
            from ..emulation import attach
            from ..emulation.config import requested_names

            attachment = attach(self, STANDARD_DTYPES - self.spec.dtypes)
            if attachment is not None:  # torch.distributed's usual backend names work on it too
                from ..distributed import serve

                serve(attachment.device_type, attachment.dispatch_key)
            if self.spec.name in requested_names():
                return
        from .hint import hint_emulation

        hint_emulation(self.spec.device_type, self.spec.name)

    def status(self) -> DeviceStatus:
        if self._status is None and os.environ.get("TORCHPLUG_EMULATE"):
            from ..emulation import status_for

            emulated = status_for(self)  # emulated, or why the requested emulation is not possible
            if emulated is not None:
                self._status = DeviceStatus(*emulated)
        if self._status is None:
            try:
                reason = self.native_unavailable_reason()
            except Exception as err:  # a probe must never break its caller
                reason = f"availability probe raised {type(err).__name__}: {err}"
            self._status = DeviceStatus("native") if reason is None else DeviceStatus("unavailable", reason)
        return self._status

    def codegen(self) -> CodegenTarget | None:
        """This backend's torch.compile target, or None when it has none (compile is unsupported).

        By default torch's own target when the device runs natively, torchplug's host target when
        it is emulated; a backend with its own Inductor codegen overrides this.
        """
        from ..codegen.select import target_for

        return target_for(self)

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
