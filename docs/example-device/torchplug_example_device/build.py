"""Compile runtime.c into a shared library with gcc on first use; later processes reuse it.

The library is cached under $XDG_CACHE_HOME (default ~/.cache), in a folder named by a digest of the
source and the contract's header, and written atomically so that concurrent first uses are safe.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from torchplug.entrypoints.device_runtime import include_dir

SOURCE = Path(__file__).resolve().parent / "runtime.c"
HEADER = include_dir() / "torchplug" / "device_runtime.h"


def runtime_library() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes() + HEADER.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    library = cache / "torchplug-example-device" / digest / "libexdev_runtime.so"
    if library.is_file():
        return library
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("the example device's runtime needs a C compiler: install gcc (or set CC)")
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=library.parent, suffix=".so", delete=False) as partial:
        pass
    try:
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", f"-I{include_dir()}", str(SOURCE), "-o", partial.name],
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as err:
        os.unlink(partial.name)
        raise RuntimeError(f"compiling the example device's runtime {SOURCE} failed:\n{err.stderr}") from None
    os.replace(partial.name, library)
    return library
