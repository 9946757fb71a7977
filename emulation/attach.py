"""Deprecated: renamed request.py (issue 31), and its attach() emulate_if_requested()."""

import warnings

from .request import check_settings, emulation_refused, status_for
from .request import emulate_if_requested as attach

__all__ = ["attach", "check_settings", "emulation_refused", "status_for"]
warnings.warn("torchplug.emulation.attach is deprecated: use torchplug.emulation.request", DeprecationWarning,
              stacklevel=2)
