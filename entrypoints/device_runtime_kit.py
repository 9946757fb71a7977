"""The device-runtime contract's test kit: any runtime table, exercised entry by entry through the Python
mirror, needing neither torch nor the device's plugin.

torchplug runs it against its own runtimes (the example device's runtime.c, and emulation's host-memory
tables); a vendor runs it against theirs before binding it to torch::

    from torchplug.entrypoints.device_runtime import load_runtime
    from torchplug.entrypoints.device_runtime_kit import assert_conforms

    assert_conforms(load_runtime("mydevice", "path/to/libmydevice_runtime.so"))

Each check exercises one behaviour the contract promises (device_runtime.h) and, when it fails, names the
entry at fault and what it did. Memory is read only through the runtime's own copies (and launch_host), so
a device whose memory the host cannot read passes as well as a host-memory one.
"""

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .device_runtime import HOST_KERNEL, DeviceProperties, LoadedRuntime, MemcpyKind, Status, status_name

PATTERN_BYTES = 4099  # odd, so a copy that rounds to words or pages drops or adds bytes visibly


@dataclass(frozen=True)
class Finding:
    """One check's verdict: the entry it judges, and what it saw (why it failed, or what passed)."""

    entry: str
    check: str
    passed: bool
    detail: str


class ContractViolation(AssertionError):
    """A runtime broke the contract; the message lists each failing entry with what it did."""


class _Failed(Exception):
    def __init__(self, entry: str, detail: str) -> None:
        super().__init__(detail)
        self.entry = entry


class _Session:
    """The runtime's raw entries, with the status each returns checked against what the check expects."""

    def __init__(self, runtime: LoadedRuntime) -> None:
        self.runtime = runtime
        self.table = runtime.table.contents

    def status(self, entry: str, *args: object) -> int:
        return getattr(self.table, entry)(*args)

    def ok(self, entry: str, *args: object) -> None:
        status = self.status(entry, *args)
        if status != Status.SUCCESS:
            raise _Failed(entry, f"returned {status_name(status)} ({self.last_error()!r})")

    def last_error(self) -> str:
        return (self.table.last_error() or b"").decode(errors="replace")

    def refuses(self, entry: str, expected: Status, *args: object) -> str:
        """Calls `entry` expecting `expected`, with a non-empty last_error(); returns that error."""
        status = self.status(entry, *args)
        if status != expected:
            raise _Failed(entry, f"returned {status_name(status)} where the contract wants {expected.name}")
        why = self.last_error()
        if not why:
            raise _Failed("last_error", f"is empty after {entry} returned {expected.name}; it must say why")
        return why

    def pointer(self, entry: str, *args: object) -> int:
        """Calls an entry that returns a pointer or handle through its out-parameter: the first one for
        stream_create and event_create, the last one otherwise."""
        out = ctypes.c_void_p()
        first = entry in ("stream_create", "event_create")
        self.ok(entry, *((ctypes.byref(out), *args) if first else (*args, ctypes.byref(out))))
        if not out.value:
            raise _Failed(entry, "succeeded but returned NULL")
        return out.value

    def device_count(self) -> int:
        count = ctypes.c_int32(-1)
        self.ok("device_count", ctypes.byref(count))
        return count.value

    def current(self) -> int:
        device = ctypes.c_int32(-1)
        self.ok("get_device", ctypes.byref(device))
        return device.value

    def read(self, device_pointer: int, nbytes: int) -> bytes:
        host = ctypes.create_string_buffer(nbytes)
        self.ok("memcpy", ctypes.addressof(host), device_pointer, nbytes, MemcpyKind.DEVICE_TO_HOST)
        return host.raw

    def write(self, device_pointer: int, data: bytes) -> None:
        host = ctypes.create_string_buffer(data, len(data))
        self.ok("memcpy", device_pointer, ctypes.addressof(host), len(data), MemcpyKind.HOST_TO_DEVICE)


def _pattern(nbytes: int, seed: int) -> bytes:
    return bytes((i * 131 + seed) % 251 for i in range(nbytes))


def _expect(entry: str, got: bytes, want: bytes, what: str) -> None:
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise _Failed(entry, f"{what}: byte {first} of {len(want)} differs (got {got[first:first + 1].hex() or 'nothing'}, "
                             f"want {want[first:first + 1].hex()})")


def devices(s: _Session) -> str:
    count = s.device_count()
    if count < 1:
        raise _Failed("device_count", f"reports {count} devices; a runtime that loads has at least one")
    return f"{count} device(s)"


def current_device_per_thread(s: _Session) -> str:
    # On a thread of its own: the calling thread's current device (torch's, when a device is in use) stays.
    last = s.device_count() - 1
    mine = s.current()
    seen: list[int | _Failed] = []

    def other() -> None:
        try:
            seen.append(s.current())
            s.ok("set_device", last)
            seen.append(s.current())
        except _Failed as failed:
            seen.append(failed)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    if isinstance(seen[-1], _Failed):
        raise seen[-1]
    if seen[0] != 0:
        raise _Failed("get_device", f"a new thread starts on device {seen[0]}; the current device starts at 0")
    if seen[1] != last:
        raise _Failed("get_device", f"reports {seen[1]} after set_device({last})")
    if s.current() != mine:
        raise _Failed("set_device", f"set_device({last}) on another thread moved this thread's device from {mine} "
                                    f"to {s.current()}: the current device is per host thread")
    return f"set_device({last}) on a new thread; this one stays on {mine}"


def invalid_device(s: _Session) -> str:
    bad = s.device_count()
    mine = s.current()
    why = s.refuses("set_device", Status.INVALID_DEVICE, bad)
    if s.current() != mine:
        raise _Failed("set_device", f"a refused set_device({bad}) moved the current device from {mine} to {s.current()}")
    s.refuses("get_device_properties", Status.INVALID_DEVICE, bad, ctypes.byref(DeviceProperties()))
    s.refuses("synchronize", Status.INVALID_DEVICE, bad)
    s.refuses("malloc", Status.INVALID_DEVICE, bad, 16, ctypes.byref(ctypes.c_void_p()))
    s.refuses("set_device", Status.INVALID_DEVICE, -1)
    why = s.refuses("set_device", Status.INVALID_DEVICE, bad)
    theirs: list[str] = []
    thread = threading.Thread(target=lambda: theirs.append(s.last_error()))
    thread.start()
    thread.join()
    if theirs == [why]:
        raise _Failed("last_error", f"a thread that never failed reads another thread's error {why!r}: it is per thread")
    return f"device {bad} refused: {why}"


def properties(s: _Session) -> str:
    props = DeviceProperties()
    s.ok("get_device_properties", 0, ctypes.byref(props))
    name = props.name.decode(errors="replace")
    if not name:
        raise _Failed("get_device_properties", "reports an empty name")
    if props.total_memory == 0 or props.multi_processor_count < 1 or props.warp_size < 1:
        raise _Failed("get_device_properties", f"reports total_memory={props.total_memory}, multi_processor_count="
                                               f"{props.multi_processor_count}, warp_size={props.warp_size}: each must be positive")
    s.ok("synchronize", 0)
    return f"{name!r}, {props.total_memory} bytes, capability {props.major}.{props.minor}"


def zero_bytes(s: _Session) -> str:
    pointer = ctypes.c_void_p()
    s.ok("malloc", 0, 0, ctypes.byref(pointer))
    s.ok("free", 0, pointer)
    s.ok("free", 0, None)
    return "malloc of 0 bytes and free of its result (and of NULL) succeed"


def copies(s: _Session) -> str:
    n = PATTERN_BYTES
    a = s.pointer("malloc", 0, n)
    b = s.pointer("malloc", 0, n)
    try:
        want = _pattern(n, 7)
        s.write(a, want)
        _expect("memcpy", s.read(a, n), want, "host to device, then device to host")
        s.ok("memcpy", b, a, n, MemcpyKind.DEVICE_TO_DEVICE)
        _expect("memcpy", s.read(b, n), want, "device to device")
        s.ok("memset", b + 10, 0xA5, 100)
        _expect("memset", s.read(b, n), want[:10] + b"\xa5" * 100 + want[110:], "100 bytes at offset 10")
    finally:
        s.ok("free", 0, a)
        s.ok("free", 0, b)
    return f"{n} bytes each way, device to device, and memset of a sub-range"


def async_copies(s: _Session) -> str:
    n = PATTERN_BYTES
    stream = s.pointer("stream_create", 0)
    pinned = s.pointer("host_malloc", n)
    a = s.pointer("malloc", 0, n)
    b = s.pointer("malloc", 0, n)
    try:
        want = _pattern(n, 11)
        ctypes.memmove(pinned, want, n)
        s.ok("memcpy_async", a, pinned, n, MemcpyKind.HOST_TO_DEVICE, stream)
        s.ok("memcpy_async", b, a, n, MemcpyKind.DEVICE_TO_DEVICE, stream)
        s.ok("stream_synchronize", stream)  # the copies may not have read the host buffer before this
        ctypes.memset(pinned, 0, n)
        s.ok("memcpy_async", pinned, b, n, MemcpyKind.DEVICE_TO_HOST, stream)
        s.ok("stream_synchronize", stream)
        _expect("memcpy_async", ctypes.string_at(pinned, n), want, "pinned host to device to device to host on a stream")
        s.ok("memcpy_async", a, b, n, MemcpyKind.DEVICE_TO_DEVICE, None)  # NULL: the default stream
        s.ok("synchronize", 0)
        _expect("memcpy_async", s.read(a, n), want, "device to device on the default stream")
    finally:
        s.ok("free", 0, a)
        s.ok("free", 0, b)
        s.ok("host_free", pinned)
        s.ok("stream_destroy", stream)
    return f"{n} bytes through pinned host memory on a created stream"


def streams_and_events(s: _Session) -> str:
    stream = s.pointer("stream_create", 0)
    start = s.pointer("event_create", 1)
    end = s.pointer("event_create", 1)
    untimed = s.pointer("event_create", 0)
    try:
        s.ok("event_record", start, stream)
        s.ok("event_record", end, stream)
        s.ok("stream_wait_event", None, end)  # the default stream waits for the created one
        s.ok("event_synchronize", end)
        s.ok("event_query", end)
        s.ok("stream_synchronize", stream)
        s.ok("stream_query", stream)
        elapsed = ctypes.c_float(-1)
        s.ok("event_elapsed_time", ctypes.byref(elapsed), start, end)
        if not elapsed.value >= 0:
            raise _Failed("event_elapsed_time", f"reports {elapsed.value} ms between two events recorded in order")
        s.ok("event_record", untimed, None)
        s.refuses("event_elapsed_time", Status.INVALID_VALUE, ctypes.byref(elapsed), start, untimed)
    finally:
        for event in (start, end, untimed):
            s.ok("event_destroy", event)
        s.ok("stream_destroy", stream)
    return f"record, wait, synchronize, query; {elapsed.value:.3f} ms elapsed; an untimed event refused"


def host_launch(s: _Session) -> str:
    if not s.table.launch_host:
        return "launch_host not offered (optional)"
    n = 257
    device = s.pointer("malloc", 0, n)
    ran: list[bool] = []

    @HOST_KERNEL
    def kernel(arguments: int) -> None:  # writes the device memory it is handed, as a host kernel does
        ctypes.memset(arguments, 0x3C, n)
        ran.append(True)

    try:
        s.ok("launch_host", 0, None, kernel, device)
        if ran != [True]:
            raise _Failed("launch_host", f"ran the kernel {len(ran)} times, not once before returning")
        _expect("launch_host", s.read(device, n), b"\x3c" * n, "what the kernel wrote")
    finally:
        s.ok("free", 0, device)
    return "the kernel ran once, its writes visible to memcpy"


CHECKS: dict[str, Callable[[_Session], str]] = {check.__name__: check for check in (
    devices, current_device_per_thread, invalid_device, properties, zero_bytes, copies, async_copies,
    streams_and_events, host_launch)}


def check_runtime(runtime: LoadedRuntime) -> list[Finding]:
    """Every check of the kit on `runtime`, in order; a failing check does not stop the others."""
    session = _Session(runtime)
    findings = []
    for name, check in CHECKS.items():
        try:
            findings.append(Finding(name, name, True, check(session)))
        except _Failed as failed:
            findings.append(Finding(failed.entry, name, False, str(failed)))
    return findings


def assert_conforms(runtime: LoadedRuntime) -> list[Finding]:
    """Runs the kit; raises ContractViolation naming each failing entry, else returns the findings."""
    findings = check_runtime(runtime)
    failed = [f for f in findings if not f.passed]
    if failed:
        lines = "\n".join(f"  {f.entry} ({f.check}): {f.detail}" for f in failed)
        raise ContractViolation(f"device runtime {runtime.name!r} of plugin {runtime.plugin!r} breaks the "
                                f"device-runtime contract (torchplug/device_runtime.h):\n{lines}")
    return findings
