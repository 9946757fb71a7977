"""torchplug-cpu's C++ kernels: build, load, choose the ISA path, install the aten overrides.

`load()` is what the backend calls: it builds the extension in csrc/ (once; later calls reuse the
cached build until a source changes), applies TORCHPLUG_CPU_ISA, and routes float16 mm / addmm /
bmm / baddbmm on CPU (their out= and in-place forms too, and so linear and matmul) to torchplug's
GEMM. Other dtypes keep torch's own kernels. `unload()` gives the ops back to torch.

TORCHPLUG_CPU_ISA=avx512|avx2|scalar forces a path; unset, the best the CPU supports runs. An
unknown value, or a path the CPU lacks, raises ValueError saying what this CPU supports.
"""

import os
import threading
from pathlib import Path
from types import ModuleType

ISA_ENV = "TORCHPLUG_CPU_ISA"
EXTENSION_NAME = "torchplug_cpu_ext"
CSRC = Path(__file__).resolve().parent / "csrc"
# at::parallel_for is inline OpenMP code: without -fopenmp it silently runs on one thread. The
# extension then binds to the libgomp.so.1 torch already loaded, so there is one thread pool.
# No -march flag: the ISA-specific files set their own targets (csrc/isa_*.cpp).
CFLAGS = ["-fopenmp"]

_lock = threading.RLock()
_extension: ModuleType | None = None


def extension() -> ModuleType:
    """The compiled module (built on first use), without touching torch's dispatcher."""
    global _extension
    with _lock:
        if _extension is None:
            from torchplug.dispatcher.extension import load_extension

            _extension = load_extension(EXTENSION_NAME, sorted(CSRC.glob("*.cpp")), CFLAGS)
        return _extension


def select_isa(name: str | None = None) -> str:
    """Use ISA path `name`, else $TORCHPLUG_CPU_ISA, else the best this CPU supports; returns it."""
    ext = extension()
    with _lock:
        choice = (name if name is not None else os.environ.get(ISA_ENV, "")).strip().lower()
        ext.set_isa(choice or ext.supported_isas()[0])
        return ext.current_isa()


def load() -> ModuleType:
    """Build if needed, select the ISA path, install the float16 GEMM overrides. Idempotent."""
    ext = extension()
    with _lock:
        if not ext.aten_overrides_installed():
            select_isa()
            ext.install_aten_overrides()
    return ext


def unload() -> None:
    """Give mm / addmm / bmm / baddbmm back to torch's kernels (the extension stays loaded)."""
    with _lock:
        if _extension is not None:
            _extension.uninstall_aten_overrides()


def current_isa() -> str:
    return extension().current_isa()


def supported_isas() -> list[str]:
    """ISA paths this CPU can run, best first (a subset of avx512, avx2, scalar)."""
    return list(extension().supported_isas())
