"""Native devices keep torch's own Inductor target; torchplug only names it (and adds its passes)."""

from collections.abc import Hashable

from ..entrypoints.compile_target import CodegenTarget
from ..entrypoints.torch_devices import torch_device_type


class NativeTarget(CodegenTarget):
    """torch's own codegen for a device torch drives natively: torchplug never replaces it."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        known = torch_device_type(device_type)
        self._codegen = known.inductor if known is not None else ""  # what torch itself generates for it
        self.name = f"torch {self._codegen} (native)" if self._codegen else "torch (native)"

    def unavailable_reason(self) -> str | None:
        if self._codegen:
            return None
        return f"torch has no Inductor backend for the new device type {self.device_type!r}"

    def install(self) -> None:
        """Nothing to add yet: torch registers its own codegen for its device types."""

    def uuid(self) -> Hashable:
        return ("torchplug-native", self.device_type)
