"""The dispatcher's runtime part (extension points): TORCHPLUG_FALLBACK and TORCHPLUG_FALLBACK_OPS are read
when a device first falls back, perhaps hours into a run, so their entries are checked at ``import torch``.

Declared in torchplug's ``torchplug.extensions`` entry points.
"""

import os
from collections.abc import Sequence

from ..entrypoints import RuntimePart


class Fallback(RuntimePart):
    def check_environment(self, plugins: Sequence[str]) -> None:
        if os.environ.get("TORCHPLUG_FALLBACK") or os.environ.get("TORCHPLUG_FALLBACK_OPS"):
            from .fallback import check_environment

            check_environment(plugins)
