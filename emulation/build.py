"""Compile the emulated runtime on first use; later processes load it from the cache.

torchplug.extension does the work: torch's own cpp_extension against the installed
torch (never an isolated build environment), and a fingerprinted cache that a later process
imports without loading torch.utils.cpp_extension. The sources include only c10/ATen headers and
pybind11, not torch/extension.h, which keeps its build the shortest of torchplug's extensions.
"""

from pathlib import Path
from types import ModuleType

from ..extension import load_extension

NAME = "torchplug_emulation"
CSRC = Path(__file__).resolve().parent / "csrc"


def sources() -> list[Path]:
    return sorted(CSRC.glob("*.cpp"))


def load() -> ModuleType:
    """The runtime's extension module, built first if the cached one is missing or stale."""
    return load_extension(NAME, sources())
