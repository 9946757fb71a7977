"""Build and load torchplug's C++ extensions: compiled on first use, then imported from a cache.

Builds use torch.utils.cpp_extension against the installed torch (never pip's isolated build
environment, which would pull another torch). After a build, a fingerprint of the sources, their
headers, the flags, torch and Python is written beside the library. A later process whose
fingerprint matches imports the library directly: no ~130 ms import of torch.utils.cpp_extension,
no ninja run. That keeps loading cheap enough to happen inside ``import torch``.
"""

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import torch

_OPTIMIZE = ["-O3"]


class ExtensionBuildError(RuntimeError):
    """A C++ extension could not be compiled or loaded; the message says where and how to fix it."""


def cache_dir() -> Path:
    """Where built extensions live: $TORCHPLUG_CACHE, else ~/.cache/torchplug, per torch version."""
    root = Path(os.environ.get("TORCHPLUG_CACHE") or Path.home() / ".cache" / "torchplug")
    return root / f"torch-{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}"


def _fingerprint(sources: Sequence[Path], cflags: Sequence[str]) -> str:
    digest = hashlib.sha256(f"{torch.__version__}|{sys.version}|{' '.join(cflags)}".encode())
    headers = {h for folder in {Path(s).parent for s in sources} for h in folder.glob("*.h")}
    for path in sorted({*map(Path, sources), *headers}):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _stamp(name: str) -> Path:
    return cache_dir() / name / "torchplug-build.json"


def _import_library(name: str, library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the C++ extension {name!r} from {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def load_cached(name: str, sources: Sequence[Path], extra_cflags: Sequence[str] | None = None) -> ModuleType | None:
    """The extension if a build of exactly these sources is cached, else None. Never compiles."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        recorded = json.loads(_stamp(name).read_text())
    except (OSError, ValueError):
        return None
    library = Path(recorded.get("library", ""))
    if recorded.get("fingerprint") != _fingerprint(sources, [*_OPTIMIZE, *(extra_cflags or ())]) or not library.is_file():
        return None
    return _import_library(recorded.get("module", name), library)


def load_extension(name: str, sources: Sequence[Path], extra_cflags: Sequence[str] | None = None) -> ModuleType:
    """Import the extension `name` built from `sources`, compiling it first if the cache is stale."""
    cached = load_cached(name, sources, extra_cflags)
    if cached is not None:
        return cached
    from torch.utils import cpp_extension  # ~130 ms to import: only when something must be built

    cflags = [*_OPTIMIZE, *(extra_cflags or ())]
    build_directory = cache_dir() / name
    print(f"torchplug: compiling the C++ extension {name!r} for torch {torch.__version__} (once; up to a "
          f"minute or two) in {build_directory}", file=sys.stderr, flush=True)
    build_directory.mkdir(parents=True, exist_ok=True)
    try:
        module = cpp_extension.load(
            name=name, sources=[str(s) for s in sources], extra_cflags=cflags,
            build_directory=str(build_directory), verbose=os.environ.get("TORCHPLUG_VERBOSE_BUILD") == "1",
        )
    except Exception as err:
        raise ExtensionBuildError(
            f"building torchplug's C++ extension {name!r} in {build_directory} failed: {err}. "
            "It needs g++ and the Python headers (python3-dev); set TORCHPLUG_VERBOSE_BUILD=1 to see "
            "the compiler output, or delete that folder to force a clean rebuild."
        ) from err
    record = {"fingerprint": _fingerprint(sources, cflags), "library": module.__file__, "module": module.__name__}
    temporary = _stamp(name).with_suffix(f".{os.getpid()}")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, _stamp(name))  # atomic: a concurrent reader sees the old stamp or the new
    return module
