"""Build and load torchplug's C++ extensions: compiled on first use, then cached.

Builds use torch.utils.cpp_extension against the installed torch (never pip's isolated build
environment, which would pull another torch). The cache is keyed by torch and Python version.
"""

import os
import sys
from pathlib import Path
from types import ModuleType

import torch


class ExtensionBuildError(RuntimeError):
    """A C++ extension could not be compiled or loaded; the message says where and how to fix it."""


def cache_dir() -> Path:
    """Where built extensions live: $TORCHPLUG_CACHE, else ~/.cache/torchplug, per torch version."""
    root = Path(os.environ.get("TORCHPLUG_CACHE") or Path.home() / ".cache" / "torchplug")
    return root / f"torch-{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}"


def load_extension(name: str, sources: list[Path], extra_cflags: list[str] | None = None) -> ModuleType:
    """Compile `sources` into the Python module `name` (if they changed since the last build) and import it."""
    from torch.utils import cpp_extension  # ~130 ms to import: only when a device is first used

    build_directory = cache_dir() / name
    build_directory.mkdir(parents=True, exist_ok=True)
    try:
        return cpp_extension.load(
            name=name,
            sources=[str(s) for s in sources],
            extra_cflags=["-O3", *(extra_cflags or [])],
            build_directory=str(build_directory),
            verbose=os.environ.get("TORCHPLUG_VERBOSE_BUILD") == "1",
        )
    except Exception as err:
        raise ExtensionBuildError(
            f"building torchplug's C++ extension {name!r} in {build_directory} failed: {err}. "
            "It needs g++ and the Python headers (python3-dev); set TORCHPLUG_VERBOSE_BUILD=1 to see "
            "the compiler output, or delete that folder to force a clean rebuild."
        ) from err
