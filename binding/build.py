"""Compile the binding on first device use; later processes load it from the cache (torchplug.extension)."""

from pathlib import Path
from types import ModuleType

from ..entrypoints.device_runtime import header_digest
from ..extension import load_extension

NAME = "torchplug_binding"
CSRC = Path(__file__).resolve().parent / "csrc"


def sources() -> list[Path]:
    return sorted(CSRC.glob("*.cpp"))


def cflags() -> list[str]:
    # The build cache fingerprints the sources' own folder; the contract's header lives elsewhere
    # (binding.h includes it by its relative place), so its digest enters the flags and the fingerprint.
    return [f"-DTORCHPLUG_DEVICE_RUNTIME_DIGEST=0x{header_digest()}"]


def load() -> ModuleType:
    """The binding's extension module, built first if the cached one is missing or stale."""
    return load_extension(NAME, sources(), extra_cflags=cflags())
