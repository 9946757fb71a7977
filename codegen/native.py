"""Native devices keep torch's own Inductor target; torchplug only names it (and adds its passes)."""

from collections.abc import Hashable

from ..entrypoints.compile_target import CodegenTarget

# What torch itself generates for each of its device types.
TORCH_TARGETS = {"cuda": "torch triton", "xpu": "torch triton", "mps": "torch metal", "cpu": "torch cpp"}


class NativeTarget(CodegenTarget):
    """torch's own codegen for a device torch drives natively: torchplug never replaces it."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.name = f"{TORCH_TARGETS.get(device_type, 'torch')} (native)"

    def unavailable_reason(self) -> str | None:
        if self.device_type in TORCH_TARGETS:
            return None
        return f"torch has no Inductor backend for the new device type {self.device_type!r}"

    def install(self) -> None:
        """Nothing to add yet: torch registers its own codegen for its device types."""

    def uuid(self) -> Hashable:
        return ("torchplug-native", self.device_type)
