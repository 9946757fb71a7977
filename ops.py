"""torchplug.ops: the portable LLM op library (defined in torchplug.dispatcher.ops)."""

from .dispatcher.ops import *  # noqa: F403
from .dispatcher.ops import __all__  # noqa: F401
