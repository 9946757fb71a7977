"""The dispatcher's C++ half (csrc/): the dtype split and the governed fallback, built on first use."""

from functools import cache
from pathlib import Path
from types import ModuleType

from .extension import load_extension

_SOURCES = ("bindings.cpp", "dtype_split.cpp", "governed_fallback.cpp")


@cache
def extension() -> ModuleType:
    return load_extension("torchplug_dispatch", [Path(__file__).parent / "csrc" / name for name in _SOURCES])
