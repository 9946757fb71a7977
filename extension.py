"""Build and load torchplug's C++ extensions: compiled on first use, then imported from a cache.

Builds use torch.utils.cpp_extension against the installed torch (never pip's isolated build
environment, which would pull another torch). After a build, a fingerprint of the sources, their
headers, the flags, torch and Python is written beside the library. A later process whose
fingerprint matches imports the library directly: no ~130 ms import of torch.utils.cpp_extension,
no ninja run. That keeps loading cheap enough to happen inside ``import torch``. Each fingerprint
has its own folder, <cache>/<name>/<fingerprint[:16]>/, so builds of different sources coexist.

Cold builds are dominated by parsing torch's headers once per translation unit and by optimising
what they instantiate, so an extension's sources are compiled as one unity translation unit (a
generated file that #includes each of them), except its kernels, listed as `separate` (the files
with hot loops, and those that switch the compiler's target ISA with a pragma), which are compiled
apart at -O3. The unity holds glue (bindings, registrations, bookkeeping around calls into torch):
it is optimised at -O1 with small-function inlining, which halves its optimisation time (by the
command line, or where kernels share that, by a pragma heading the unity file). GCC is also told to
collect its garbage less often (no effect on the code; about 300 MB more memory per compiler).
Processes that start together build each extension once: a file lock in the cache makes the
others wait for the first build, and then load it.

While the compiler runs, a progress line on stderr says what is built, for how long so far, and
how long the last build of it took on this machine (recorded in <cache root>/build-times.json).
`torchplug build` runs every build up front, e.g. when baking a container image.
"""

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

_KERNELS = ["-O3"]  # the `separate` files
_GLUE = ["-O1", "-finline-small-functions"]  # the unity, where it has the command line to itself
_GLUE_PRAGMA = '#pragma GCC optimize("O1", "inline-small-functions")'  # the unity, beside kernels
_GCC_MEMORY = ["--param", "ggc-min-expand=100", "--param", "ggc-min-heapsize=524288"]  # 10% less time
_STAMP = "torchplug-build.json"  # written beside a finished build: its fingerprint and library
_TIMES = "build-times.json"  # in the cache root: seconds the last build of each extension took here
_NOTICES = "notices.json"  # in cache_dir(): the once-per-cache notices already given (first_notice)
_PROGRESS_EVERY_S = 15.0  # progress lines in a log; on a terminal the line updates every second


@dataclass(frozen=True)
class Build:
    name: str
    seconds: float


# Extensions compiled in this process, in order: `torchplug doctor` reports them apart from op time.
builds: list[Build] = []


class ExtensionBuildError(RuntimeError):
    """A C++ extension could not be compiled or loaded; the message says where and how to fix it."""


def cache_dir() -> Path:
    """Where built extensions live: $TORCHPLUG_CACHE, else ~/.cache/torchplug, per torch version."""
    root = Path(os.environ.get("TORCHPLUG_CACHE") or Path.home() / ".cache" / "torchplug")
    return root / f"torch-{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}"


def _times_file() -> Path:
    return cache_dir().parent / _TIMES


def last_build_seconds(name: str) -> float | None:
    """How long the last build of `name` took on this machine (any torch version), if recorded."""
    try:
        return float(json.loads(_times_file().read_text())[name])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record_build_seconds(name: str, seconds: float) -> None:
    try:
        times = json.loads(_times_file().read_text())
    except (OSError, ValueError):
        times = {}
    times[name] = round(seconds, 1)
    temporary = _times_file().with_suffix(f".{os.getpid()}")
    try:
        temporary.write_text(json.dumps(times, indent=1))
        os.replace(temporary, _times_file())
    except OSError:  # a read-only cache still builds; it only loses the estimate
        pass


def first_notice(key: str) -> bool:
    """Whether the notice `key` is new to this cache (then it is recorded as given): a notice that holds
    until the user acts (e.g. "not built yet") is said once per cache, not on every ``import torch``.
    A cache that cannot be written to says it every time rather than never."""
    notices_file = cache_dir() / _NOTICES
    try:
        given = json.loads(notices_file.read_text())
    except (OSError, ValueError):
        given = []
    if key in given:
        return False
    try:
        notices_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = notices_file.with_suffix(f".{os.getpid()}")
        temporary.write_text(json.dumps([*given, key]))
        os.replace(temporary, notices_file)
    except OSError:
        pass
    return True


@contextmanager
def _progress(name: str) -> Iterator[None]:
    """A progress line on stderr while `name` compiles: elapsed time against the last build's."""
    last = last_build_seconds(name)
    typical = f"the last build here took {last:.0f} s" if last else "no earlier build here to compare with"
    tty = sys.stderr.isatty()
    done = threading.Event()

    def report() -> None:
        start = time.monotonic()
        while not done.wait(1.0 if tty else _PROGRESS_EVERY_S):
            line = f"torchplug: building {name!r}: {time.monotonic() - start:.0f} s elapsed ({typical})"
            print(f"\r{line}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    reporter = threading.Thread(target=report, name=f"torchplug-build-{name}", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        done.set()
        reporter.join()
        if tty:
            print(file=sys.stderr)


def _fingerprint(sources: Sequence[Path], cflags: Sequence[str]) -> str:
    digest = hashlib.sha256(f"{torch.__version__}|{sys.version}|{' '.join(cflags)}".encode())
    headers = {h for folder in {Path(s).parent for s in sources} for h in folder.glob("*.h")}
    for path in sorted({*map(Path, sources), *headers}):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _build_directory(name: str, fingerprint: str) -> Path:
    # One folder per fingerprint: environments with different sources (two versions of a plugin,
    # a checkout beside an install) keep their own builds instead of evicting each other's.
    return cache_dir() / name / fingerprint[:16]


def _import_library(name: str, library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the C++ extension {name!r} from {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def load_cached(name: str, sources: Sequence[Path], extra_cflags: Sequence[str] | None = None,
                separate: Sequence[str] = ()) -> ModuleType | None:
    """The extension if a build of exactly these sources is cached, else None. Never compiles."""
    if name in sys.modules:
        return sys.modules[name]
    fingerprint = _fingerprint(sources, _build_key(extra_cflags, separate))
    try:
        recorded = json.loads((_build_directory(name, fingerprint) / _STAMP).read_text())
    except (OSError, ValueError):
        return None
    library = Path(recorded.get("library", ""))
    if recorded.get("fingerprint") != fingerprint or not library.is_file():
        return None
    return _import_library(recorded.get("module", name), library)


@contextmanager
def _build_lock(build_directory: Path, name: str) -> Iterator[None]:
    """Hold the build directory's lock; a process that must wait says so once."""
    with open(build_directory / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"torchplug: waiting for another process that is building {name!r}", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cflags(extra_cflags: Sequence[str] | None, separate: Sequence[str]) -> list[str]:
    return [*(_KERNELS if separate else _GLUE), *(extra_cflags or ())]


def _build_key(extra_cflags: Sequence[str] | None, separate: Sequence[str]) -> list[str]:
    """What enters the fingerprint beside the sources: how each file is compiled."""
    return [*_cflags(extra_cflags, separate), *(["separate:", *sorted(separate), _GLUE_PRAGMA] if separate else [])]


def _unity_sources(build_directory: Path, sources: Sequence[Path], separate: Sequence[str]) -> list[str]:
    """One generated translation unit, the glue, that #includes every source not named in `separate`, plus those."""
    alone = [Path(s) for s in sources if Path(s).name in separate]
    merged = [Path(s) for s in sources if Path(s).name not in separate]
    if not merged:
        return [str(s) for s in sources]
    unity = build_directory / "unity.cpp"
    unity.write_text((f"{_GLUE_PRAGMA}  // the kernels compiled beside it keep -O3\n" if alone else "")
                     + "// Generated by torchplug.extension: the glue as one translation unit, so torch's headers "
                     "are parsed once.\n" + "".join(f'#include "{Path(s).resolve()}"\n' for s in merged))
    return [str(unity), *map(str, alone)]


@functools.cache
def _gcc() -> bool:
    """Whether cpp_extension's compiler ($CXX, else c++) is GCC, which takes _GCC_MEMORY."""
    try:
        version = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "Free Software Foundation" in version and "clang" not in version


def load_extension(name: str, sources: Sequence[Path], extra_cflags: Sequence[str] | None = None,
                   separate: Sequence[str] = ()) -> ModuleType:
    """Import the extension `name` built from `sources`, compiling it first if the cache is stale.

    The sources are compiled as one translation unit of glue (-O1), except the kernels named in
    `separate` (-O3 each).
    """
    cached = load_cached(name, sources, extra_cflags, separate)
    if cached is not None:
        return cached
    cflags = [*_cflags(extra_cflags, separate), *(_GCC_MEMORY if _gcc() else [])]
    fingerprint = _fingerprint(sources, _build_key(extra_cflags, separate))
    build_directory = _build_directory(name, fingerprint)
    build_directory.mkdir(parents=True, exist_ok=True)
    with _build_lock(build_directory, name):
        cached = load_cached(name, sources, extra_cflags, separate)  # built by the process we waited for
        if cached is not None:
            return cached
        return _build(name, sources, cflags, fingerprint, build_directory, separate)


def _build(name: str, sources: Sequence[Path], cflags: list[str], fingerprint: str, build_directory: Path,
           separate: Sequence[str]) -> ModuleType:
    from torch.utils import cpp_extension  # ~130 ms to import: only when something must be built

    print(f"torchplug: compiling the C++ extension {name!r} for torch {torch.__version__} (once per torch "
          f"version) in {build_directory}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        with _progress(name):
            module = cpp_extension.load(
                name=name, sources=_unity_sources(build_directory, sources, separate), extra_cflags=cflags,
                build_directory=str(build_directory), verbose=os.environ.get("TORCHPLUG_VERBOSE_BUILD") == "1",
            )
    except Exception as err:
        raise ExtensionBuildError(
            f"building torchplug's C++ extension {name!r} in {build_directory} failed: {err}. "
            "It needs g++ and the Python headers (python3-dev); set TORCHPLUG_VERBOSE_BUILD=1 to see "
            "the compiler output, or delete that folder to force a clean rebuild."
        ) from err
    record = {"fingerprint": fingerprint, "library": module.__file__, "module": module.__name__}
    stamp = build_directory / _STAMP
    temporary = stamp.with_suffix(f".{os.getpid()}")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, stamp)  # atomic: a concurrent reader sees no stamp or the whole one
    seconds = time.perf_counter() - start
    builds.append(Build(name, seconds))
    _record_build_seconds(name, seconds)
    print(f"torchplug: built {name!r} in {seconds:.0f} s", file=sys.stderr, flush=True)
    return module
