"""The small C++ extension of torchplug.distributed, compiled on first use (torchplug.extension)."""

from pathlib import Path
from types import ModuleType

from ..extension import load_extension

NAME = "torchplug_distributed"
CSRC = Path(__file__).resolve().parent / "csrc"


def load() -> ModuleType:
    return load_extension(NAME, sorted(CSRC.glob("*.cpp")))
