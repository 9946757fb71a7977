"""The loaded C++ runtime: built and configured on first device use, once per process.

Every attached device type is configured together, the first time any of them is used, so the
autograd engine (which sizes its device threads on its first backward) and torch's accelerator
hooks see all of them at once.
"""

import atexit
import ctypes
import sys
import threading
import weakref
from collections.abc import Callable
from types import ModuleType

import torch

from .. import TorchplugWarning, warn
from ..entrypoints.device_runtime import LoadedRuntime
from ..entrypoints.torch_devices import CUDA, PRIVATEUSE1, by_dispatch_key
from .emulated import EmulatedDevices, emulated_devices
from .config import current

_lock = threading.RLock()
_ext: ModuleType | None = None
_failure: BaseException | None = None
_configured: set[str] = set()  # device types
_pending_seeds: dict[str, dict[int, int]] = {}  # device type -> {index or -1 for all: seed}
_before_configure: dict[str, Callable[[], None]] = {}  # dispatch key -> what to run before configuring it


class EmulationNotice(TorchplugWarning):
    """Shown once per device type: tensors on it live in host memory and kernels run on the CPU."""


def is_configured(device_type: str) -> bool:
    return device_type in _configured


def extension() -> ModuleType:
    """The runtime's C++ module, with every attached device type configured."""
    ext = _ext
    if ext is not None and len(_configured) == len(emulated_devices()):
        return ext
    return ensure()


def ensure() -> ModuleType:
    global _ext, _failure
    with _lock:
        if _failure is not None:  # a failed build is not retried in the same process
            raise _failure
        try:
            if _ext is None:
                from .build import load

                _ext = load()
            new = [a for a in emulated_devices().values() if a.device_type not in _configured]
            for devices in new:
                _configure(_ext, devices)
            if new:
                _notice(new)
            _choose_accelerator(_ext)
        except Exception as err:
            _failure = err
            raise
        return _ext


def host_runtime(device_type: str) -> LoadedRuntime:
    """Emulation's host-memory runtime for `device_type` (an emulated torch device type), as the contract's
    Python mirror: the table (torchplug/device_runtime.h) that emulation's allocator, guard and copies call."""
    devices = emulated_devices().get(device_type)
    if devices is None:
        raise ValueError(f"{device_type!r} is not emulated in this process (emulated: "
                         f"{', '.join(emulated_devices()) or 'none'}); set TORCHPLUG_EMULATE before importing torch")
    return LoadedRuntime.at_address(f"emulated {device_type}", extension().runtime_table(devices.dispatch_key))


def before_configure(dispatch_key: str, callback: Callable[[], None]) -> None:
    """Run `callback` just before the C++ runtime takes `dispatch_key` over (hooks.py drops its stub then)."""
    _before_configure[dispatch_key] = callback


def _configure(ext: ModuleType, a: EmulatedDevices) -> None:
    if callback := _before_configure.pop(a.dispatch_key, None):
        callback()
    refused = sorted(str(d).removeprefix("torch.") for d in a.refused_dtypes)
    facts = by_dispatch_key(a.dispatch_key)
    adopt_native = facts.runtime_replaceable and facts.built()  # this build's kernels for the type, taken over
    if adopt_native:
        from . import late_kernels

        late_kernels.watch(ext, a.dispatch_key)  # before configure adopts what is there: nothing slips between
    ext.configure(a.dispatch_key, a.count, list(a.capacities), refused, a.backend, adopt_native=adopt_native)
    shape = a.shape
    ext.set_device_properties(a.dispatch_key, a.device_name, shape.compute_units, *shape.capability, shape.warp_size)
    if a.dispatch_key == PRIVATEUSE1.dispatch_key:
        ext.register_privateuse1_hooks()
    namespace = getattr(torch, a.device_type, None)
    if hasattr(namespace, "default_generators"):  # torch.cuda / torch.xpu's Python generator objects
        namespace.default_generators = tuple(ext.default_generators(a.dispatch_key))
    for index, seed in _pending_seeds.pop(a.device_type, {}).items():
        for i in range(a.count) if index < 0 else (index,):
            ext.manual_seed(a.dispatch_key, i, seed)
    _configured.add(a.device_type)


_accelerator_chosen = False


def _choose_accelerator(ext: ModuleType) -> None:
    """Until a backward picks one, torch's accelerator is the first type listed in TORCHPLUG_EMULATE."""
    global _accelerator_chosen
    if _accelerator_chosen:
        return
    if CUDA.built() and torch.cuda.device_count() == 0 and CUDA.name not in emulated_devices():
        # torch's CUDA hooks report CUDA as built, and torch refuses two accelerators ("Cannot have
        # both XPU and cuda"): with no GPU to serve, they stop claiming the slot (csrc/hooks.cpp).
        ext.mute_cuda_hooks()
    by_backend = {a.backend: a for a in emulated_devices().values()}
    for name in current().names:
        a = by_backend.get(name)
        if a is not None:
            ext.set_accelerator(a.dispatch_key)
            _accelerator_chosen = True
            return


def cuda_hooks_state() -> str:
    """Which CUDA hooks torch uses: 'torch', 'emulated' (torchplug's, for emulated cuda) or 'muted'."""
    return _ext.cuda_hooks_state() if _ext is not None else "torch"


def queue_seed(device_type: str, index: int, seed: int) -> None:
    """manual_seed before the first device use: applied when the device type is configured."""
    with _lock:
        _pending_seeds.setdefault(device_type, {})[index] = seed


_drain_registered = False


def prepare_backward(tensors) -> None:
    """Before autograd runs: load the runtime and make the roots' device type torch's accelerator."""
    global _drain_registered
    if not emulated_devices():
        return
    ext = extension()
    if not _drain_registered:
        atexit.register(_drain_autograd_workers)
        _drain_registered = True
    types = {t.device.type for t in tensors if isinstance(t, torch.Tensor)} & set(emulated_devices())
    if not types:
        return
    if len(types) > 1:
        raise RuntimeError(
            f"backward over outputs on several emulated device types ({', '.join(sorted(types))}): torch "
            "2.13's autograd engine serves one accelerator device type per backward call. Call backward "
            "once per device type, or move the outputs to one device first."
        )
    ext.set_accelerator(emulated_devices()[types.pop()].dispatch_key)


def _drain_autograd_workers() -> None:
    """At exit: let autograd's device threads drop the graphs they last ran while Python still runs.

    A device thread may still hold a finished graph when the main thread, woken by its
    completion, reaches interpreter shutdown. Releasing the graph then releases Python objects
    (torch stashes a contextvars.Context in every backward's thread-local snapshot), which needs
    the GIL and aborts the process ("terminate called without an active exception"). So each
    device thread (one per device index) runs one more tiny backward, which it can start only
    after finishing with the earlier graphs, and we wait until it has released that one as well:
    the marker stashed in its snapshot is freed exactly then. Its leaf and gradient are kept
    alive on purpose, so nothing else in it needs Python afterwards.
    """
    candidates = [a for a in emulated_devices().values() if is_configured(a.device_type)]
    for index in range(max((a.count for a in candidates), default=0)):
        owner = next((a for a in candidates if index < a.count), None)
        if owner is not None:
            try:
                _drain(torch.device(owner.device_type, index))
            except Exception:  # exiting anyway: never turn a clean exit into an error
                pass


class _Marker:
    """Freed when autograd's device thread lets go of the tiny graph that holds it."""


def _drain(device: torch.device) -> None:
    released = threading.Event()
    marker = _Marker()
    weakref.finalize(marker, released.set)
    leaf = torch.zeros((), device=device, requires_grad=True)
    grad = torch.ones((), device=device)
    for kept in (leaf, grad):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
    out = leaf * 1
    prepare_backward((out,))
    torch._C._stash_obj_in_tls("context", marker)  # what torch's _engine_run_backward stashes
    try:
        torch.autograd.Variable._execution_engine.run_backward(
            (out,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True
        )
    finally:
        torch._C._remove_obj_from_tls("context")
    del marker, out
    released.wait(timeout=2.0)


def _notice(emulated: list[EmulatedDevices]) -> None:
    """One notice for the types set up together, at the user's line that first used any of them."""
    if len(emulated) == 1:
        a = emulated[0]
        message = (
            f"torchplug: '{a.device_type}' is an EMULATED device (backend '{a.backend}', TORCHPLUG_EMULATE): "
            f"{a.count} device(s) backed by host memory, kernels run on the CPU. It is not a real {a.label}."
        )
    else:
        each = "; ".join(f"'{a.device_type}' (backend '{a.backend}'): {a.count} device(s), not a real {a.label}"
                         for a in emulated)
        message = (f"torchplug: EMULATED devices (TORCHPLUG_EMULATE), set up together on this first use of one: "
                   f"{each}. They are backed by host memory; kernels run on the CPU.")
    try:
        warn(message, EmulationNotice)
    except Warning:  # warnings turned into errors must not make the device unusable
        print(message, file=sys.stderr)
