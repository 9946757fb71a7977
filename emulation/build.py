"""Compile the emulated runtime on first use; later processes load it from the cache.

torchplug.extension does the work: torch's own cpp_extension against the installed
torch (never an isolated build environment), and a fingerprinted cache that a later process
imports without loading torch.utils.cpp_extension. The sources include only c10/ATen headers and
pybind11, not torch/extension.h, which keeps its build the shortest of torchplug's extensions.
"""

from pathlib import Path
from types import ModuleType

from ..entrypoints.device_runtime import header_digest
from ..extension import load_extension

NAME = "torchplug_emulation"
CSRC = Path(__file__).resolve().parent / "csrc"


def sources() -> list[Path]:
    return sorted(CSRC.glob("*.cpp"))


def cflags() -> list[str]:
    # The build cache fingerprints csrc/ only; the contract's header (emulation.h includes it by its place
    # in the package) enters the fingerprint through its digest in the flags.
    return [f"-DTORCHPLUG_DEVICE_RUNTIME_DIGEST=0x{header_digest()}"]


def load() -> ModuleType:
    """The runtime's extension module, built first if the cached one is missing or stale."""
    return load_extension(NAME, sources(), extra_cflags=cflags())
