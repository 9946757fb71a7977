"""The device-runtime contract: what a device with its own memory and driver gives torchplug.

The contract is a plain C ABI, ``include/torchplug/device_runtime.h`` (shipped with this package;
`include_dir()` finds it): a vendor's shared library exports ``torchplug_device_runtime_v1()``,
which returns a versioned table of function pointers (device count and selection, allocate/free,
copies each way, synchronous and on a stream, memset, streams, events, pinned host memory,
properties). torchplug's binding (torchplug.binding) turns any such table into a torch device with
no Python in the hot path.

This module is its Python mirror: the same table as a ctypes structure (`RuntimeTable`), the load
and version check (`load_runtime`), the `DeviceRuntime` protocol documenting each entry, and
`RuntimeBackend`, the Backend a plugin with its own runtime subclasses.
"""

import ctypes
import enum
import functools
import hashlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, Protocol

from .backend import Backend

ABI_VERSION = 1  # TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION
SYMBOL = "torchplug_device_runtime_v1"


def include_dir() -> Path:
    """The folder to pass as ``-I`` when compiling a runtime against device_runtime.h."""
    return Path(__file__).resolve().parent / "include"


def header_digest() -> str:
    """16 hex digits of device_runtime.h's content: extensions built against it put it in their build flags."""
    return hashlib.sha256((include_dir() / "torchplug" / "device_runtime.h").read_bytes()).hexdigest()[:16]


class Status(enum.IntEnum):
    SUCCESS = 0
    INVALID_DEVICE = 1
    OUT_OF_MEMORY = 2
    INVALID_VALUE = 3
    NOT_READY = 4
    UNSUPPORTED = 5
    INTERNAL = 6


def status_name(status: int) -> str:
    """The Status name of a C status code ("OUT_OF_MEMORY"), or "status N" for a code the contract lacks."""
    return Status(status).name if status in Status._value2member_map_ else f"status {status}"


class MemcpyKind(enum.IntEnum):
    HOST_TO_DEVICE = 0
    DEVICE_TO_HOST = 1
    DEVICE_TO_DEVICE = 2


class DeviceProperties(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("total_memory", ctypes.c_uint64),
                ("multi_processor_count", ctypes.c_int32), ("major", ctypes.c_int32), ("minor", ctypes.c_int32),
                ("warp_size", ctypes.c_int32)]


_S = ctypes.c_int  # torchplug_status
_P = ctypes.c_void_p
_I = ctypes.c_int32
_Z = ctypes.c_size_t
HOST_KERNEL = ctypes.CFUNCTYPE(None, _P)

# The table's entries in the header's order, with their C signatures (result first).
ENTRIES: tuple[tuple[str, tuple], ...] = (
    ("last_error", (ctypes.c_char_p,)),
    ("device_count", (_S, ctypes.POINTER(_I))),
    ("set_device", (_S, _I)),
    ("get_device", (_S, ctypes.POINTER(_I))),
    ("get_device_properties", (_S, _I, ctypes.POINTER(DeviceProperties))),
    ("synchronize", (_S, _I)),
    ("malloc", (_S, _I, _Z, ctypes.POINTER(_P))),
    ("free", (_S, _I, _P)),
    ("memcpy", (_S, _P, _P, _Z, ctypes.c_int)),
    ("memcpy_async", (_S, _P, _P, _Z, ctypes.c_int, _P)),
    ("memset", (_S, _P, ctypes.c_int, _Z)),
    ("host_malloc", (_S, _Z, ctypes.POINTER(_P))),
    ("host_free", (_S, _P)),
    ("stream_create", (_S, ctypes.POINTER(_P), _I)),
    ("stream_destroy", (_S, _P)),
    ("stream_synchronize", (_S, _P)),
    ("stream_query", (_S, _P)),
    ("stream_wait_event", (_S, _P, _P)),
    ("event_create", (_S, ctypes.POINTER(_P), _I)),
    ("event_destroy", (_S, _P)),
    ("event_record", (_S, _P, _P)),
    ("event_query", (_S, _P)),
    ("event_synchronize", (_S, _P)),
    ("event_elapsed_time", (_S, ctypes.POINTER(ctypes.c_float), _P, _P)),
    ("launch_host", (_S, _I, _P, HOST_KERNEL, _P)),
)
OPTIONAL = frozenset({"launch_host"})


class RuntimeTable(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32), ("name", ctypes.c_char_p),
                *((name, ctypes.CFUNCTYPE(*signature)) for name, signature in ENTRIES)]


class DeviceRuntimeError(RuntimeError):
    """A runtime library that cannot be loaded or bound; the message names the plugin and the fix."""


class DeviceRuntime(Protocol):
    """The contract's entries as Python methods (each C entry returns a Status; these raise instead).

    Device memory is addressed by integers the host must not dereference: torchplug moves bytes only
    through `memcpy`, `memcpy_async`, `memset` and `launch_host`.
    """

    name: str

    def device_count(self) -> int: ...
    def set_device(self, device: int) -> None: ...
    def get_device(self) -> int: ...
    def get_device_properties(self, device: int) -> DeviceProperties: ...
    def synchronize(self, device: int) -> None: ...
    def malloc(self, device: int, nbytes: int) -> int: ...
    def free(self, device: int, pointer: int) -> None: ...
    def memcpy(self, destination: int, source: int, nbytes: int, kind: MemcpyKind) -> None: ...
    def memcpy_async(self, destination: int, source: int, nbytes: int, kind: MemcpyKind, stream: int) -> None: ...
    def memset(self, destination: int, value: int, nbytes: int) -> None: ...
    def host_malloc(self, nbytes: int) -> int: ...
    def host_free(self, pointer: int) -> None: ...
    def stream_create(self, priority: int) -> int: ...
    def stream_destroy(self, stream: int) -> None: ...
    def stream_synchronize(self, stream: int) -> None: ...
    def stream_query(self, stream: int) -> bool: ...
    def stream_wait_event(self, stream: int, event: int) -> None: ...
    def event_create(self, enable_timing: bool) -> int: ...
    def event_destroy(self, event: int) -> None: ...
    def event_record(self, event: int, stream: int) -> None: ...
    def event_query(self, event: int) -> bool: ...
    def event_synchronize(self, event: int) -> None: ...
    def event_elapsed_time(self, start: int, end: int) -> float: ...


class LoadedRuntime:
    """A runtime library whose table passed the version check; calls raise DeviceRuntimeError."""

    def __init__(self, plugin: str, library: ctypes.CDLL | None, table: "ctypes._Pointer[RuntimeTable]") -> None:
        self.plugin, self.library, self.table = plugin, library, table

    @classmethod
    def at_address(cls, plugin: str, address: int) -> "LoadedRuntime":
        """A table already in this process (e.g. emulation's host runtime, whose module gives its address),
        version-checked as a loaded library's is. The table must live as long as the process."""
        table = ctypes.cast(address, ctypes.POINTER(RuntimeTable))
        _check_table(plugin, f"the table at {address:#x}", table.contents)
        return cls(plugin, None, table)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.table.contents)

    @property
    def name(self) -> str:
        return (self.table.contents.name or b"").decode()

    def call(self, entry: str, *args: object) -> None:
        status = getattr(self.table.contents, entry)(*args)
        if status != Status.SUCCESS:
            why = self.table.contents.last_error().decode(errors="replace")
            raise DeviceRuntimeError(f"plugin {self.plugin!r}: its runtime's {entry} failed with "
                                     f"{status_name(status)}: {why}")

    def device_count(self) -> int:
        count = ctypes.c_int32()
        self.call("device_count", ctypes.byref(count))
        return count.value


_loaded: dict[str, LoadedRuntime] = {}
_lock = threading.Lock()


def load_runtime(plugin: str, path: str | os.PathLike) -> LoadedRuntime:
    """Load the runtime library at `path` for `plugin` and check its table (once per path)."""
    key = os.fspath(path)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        try:
            library = ctypes.CDLL(key)
        except OSError as err:
            raise DeviceRuntimeError(f"plugin {plugin!r}: cannot load its device runtime {key}: {err}") from None
        try:
            entry = getattr(library, SYMBOL)
        except AttributeError:
            raise DeviceRuntimeError(f"plugin {plugin!r}: its device runtime {key} does not export {SYMBOL}(); "
                                     "a runtime library defines it (see torchplug/device_runtime.h)") from None
        entry.restype = ctypes.POINTER(RuntimeTable)
        table = entry()
        if not table:
            raise DeviceRuntimeError(f"plugin {plugin!r}: {SYMBOL}() in {key} returned NULL")
        _check_table(plugin, key, table.contents)
        loaded = LoadedRuntime(plugin, library, table)
        _loaded[key] = loaded
        return loaded


def _check_table(plugin: str, path: str, table: RuntimeTable) -> None:
    if table.abi_version != ABI_VERSION:
        raise DeviceRuntimeError(
            f"plugin {plugin!r}: its device runtime {path} was built for device-runtime ABI version "
            f"{table.abi_version}, but this torchplug binds version {ABI_VERSION}; rebuild the runtime against "
            f"the torchplug/device_runtime.h in {include_dir()}, or install a torchplug of ABI {table.abi_version}")
    if table.struct_size < ctypes.sizeof(RuntimeTable):
        raise DeviceRuntimeError(
            f"plugin {plugin!r}: its device runtime {path} returns a table of {table.struct_size} bytes, smaller "
            f"than the {ctypes.sizeof(RuntimeTable)} bytes of ABI version {ABI_VERSION}; it was built against an "
            "older or modified device_runtime.h: rebuild it against this torchplug's header")
    missing = [name for name, _ in ENTRIES if name not in OPTIONAL and not getattr(table, name)]
    if missing:
        raise DeviceRuntimeError(f"plugin {plugin!r}: its device runtime {path} leaves required entries NULL: "
                                 f"{', '.join(missing)}")


class RuntimeBackend(Backend):
    """A Backend whose device is driven by its own runtime library (a new device name: PrivateUse1).

    Subclasses set `spec` and implement `runtime_library()`. The device is native when the library
    loads, passes the version check and reports at least one device.
    """

    # The governed CPU fallback's policy for ops without a kernel of the device's own (allow, warn or
    # error; TORCHPLUG_FALLBACK overrides it). A device that computes only through the fallback says "allow".
    fallback_policy: ClassVar[str] = "warn"

    def host_kernels(self) -> Iterable[str]:
        """Ops ("aten::fill_.Scalar") the device runs as host kernels: torch's CPU kernel inside the runtime's
        launch_host window, on the device memory itself (no staging copies). Only for runtimes that offer
        launch_host; ops with a kernel of their own or a composite one are left alone. Default: none."""
        return ()

    def runtime_library(self) -> Path:
        """The path of the shared library exporting torchplug_device_runtime_v1 (built here on first
        use if the plugin compiles it then)."""
        raise NotImplementedError(f"{type(self).__name__} must implement runtime_library()")

    @functools.cached_property
    def _runtime(self) -> LoadedRuntime:
        return load_runtime(self.spec.name, self.runtime_library())

    def runtime(self) -> LoadedRuntime:
        """The loaded, version-checked runtime (loads it on first call; raises DeviceRuntimeError)."""
        return self._runtime

    def native_unavailable_reason(self) -> str | None:
        try:
            count = self.runtime().device_count()
        except Exception as err:
            return str(err)
        return None if count > 0 else f"its runtime {self.runtime().name!r} reports no device"
