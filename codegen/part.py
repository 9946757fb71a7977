"""The codegen runtime part (extension points): each backend's torch.compile target, armed at autoload
and chosen by the device's mode.

Declared in torchplug's ``torchplug.extensions`` entry points; runs after emulation has attached
(it asks the extension points whether the device is emulated).
"""

from collections.abc import Sequence
from typing import Any

from ..entrypoints import CodegenTarget, RuntimePart


class Compile(RuntimePart):
    after = ("emulation",)  # it asks whether the device is emulated

    def setup(self, backend: Any) -> None:
        from .entry import arm

        arm(backend)

    def check_environment(self, plugins: Sequence[str]) -> None:
        from .fidelity import check_mode_setting

        check_mode_setting()

    def codegen(self, backend: Any) -> CodegenTarget | None:
        from .select import target_for

        return target_for(backend)
