"""The dispatcher's C++ half (csrc/): the dtype split and the governed fallback, a torch C++ extension built
on first use (`torchplug.dispatcher.native` is its deprecated alias)."""

from pathlib import Path
from types import ModuleType

from ..extension import load_cached, load_extension

NAME = "torchplug_dispatch"  # the module's name once loaded
_SOURCES = [Path(__file__).parent / "csrc" / name for name in ("bindings.cpp", "dtype_split.cpp", "governed_fallback.cpp")]


def extension(build: bool = True) -> ModuleType | None:
    """The compiled module, built first if needed; with build=False, None unless a build is cached."""
    return load_extension(NAME, _SOURCES) if build else load_cached(NAME, _SOURCES)
