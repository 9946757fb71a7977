"""Deprecated: renamed emulated.py (issue 31); Attachment is EmulatedDevices, attached() emulated_devices()."""

import warnings

from .emulated import EmulatedDevices as Attachment
from .emulated import emulated_devices as attached
from .emulated import record

__all__ = ["Attachment", "attached", "record"]
warnings.warn("torchplug.emulation.attachment is deprecated: use torchplug.emulation.emulated", DeprecationWarning,
              stacklevel=2)
