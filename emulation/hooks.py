"""Where the emulated runtime plugs into torch, at autoload: cheap Python patches only.

* torch.xpu / torch.cuda / torch.mps get the device module's functions, and torch.cuda / torch.xpu
  the emulated graph classes (graphs.py). torch's C++ calls
  torch.<type>._lazy_init() before the first xpu/cuda tensor, which now loads the runtime.
* MPS has no lazy-init hook (its ops reach the dispatcher directly), so a Python fallback on the
  MPS key loads the runtime on the first MPS op, steps aside and re-runs the op on the C++ path.
  Some MPS uses ask torch's device guard first (x.to("mps") looks up the current device): the
  MPS guard is registered at autoload from a cached build, and, in the one process that has to
  build it, Tensor.to / torch.tensor / torch.as_tensor load the runtime when they first see "mps".
* A new device name takes torch's PrivateUse1 slot and is registered as torch.<name>.
* torch.UntypedStorage(n, device=...) and UntypedStorage.resize_, which a CPU build refuses for
  'cuda' and 'mps' ("built without USE_CUDA"; FSDP2 frees and regrows parameter storages so),
  and torch.load(map_location=...), whose deserializers allocate storages that way.
* autograd: the runtime must be loaded before torch's first backward (the engine sizes its
  device threads then, and torch then fixes its accelerator), and each backward makes its
  outputs' device type torch's accelerator (see csrc/hooks.cpp).
* torch's XPU and MPS accelerator hooks are created the first time anything asks torch for its
  accelerator; ours must be registered by then. So a cached build is loaded (not configured) at
  autoload, about 2 ms, and torch.accelerator's functions load the runtime before they run.
"""

import functools
import inspect
import threading
import types
from typing import Any

import torch

from ..entrypoints.torch_devices import PRIVATEUSE1, by_dispatch_key, torch_device_type
from . import aliases
from .emulated import EmulatedDevices

_lock = threading.Lock()
_modules: dict[str, Any] = {}  # device type -> DeviceModule
_first_use_stubs: dict[str, torch.library.Library] = {}  # dispatch key -> the Python fallback that loads the runtime
_autograd_wrapped = False
_serialization_registered = False
_accelerator_wrapped = False
_storages_wrapped = False


def install(devices: EmulatedDevices) -> None:
    from .device_module import DeviceModule

    module = DeviceModule(devices)
    facts = by_dispatch_key(devices.dispatch_key)  # what torch defines for the type (entrypoints/torch_devices.py)
    with _lock:
        _modules[devices.device_type] = module
        if devices.dispatch_key == PRIVATEUSE1.dispatch_key:
            _register_new_device(devices, module)
        else:
            # torch.<type> and its submodules' aliases (torch.cuda.memory's is_initialized, ...)
            aliases.replace(getattr(torch, devices.device_type), module.exports(), f"torch.{devices.device_type}")
            from .graphs import install as install_graphs

            install_graphs(module)  # torch.cuda / torch.xpu graphs; see graphs.py
        preloaded = _preload_runtime()
        if preloaded is not None:
            # Hooks torch calls before the first device use (torch.Generator(device=...)) set the
            # runtime up through this; emulated cuda needs torchplug's CUDA hooks for them.
            preloaded.set_configure_callback(_configure_runtime)
            if facts.hooks_built_at_import:
                preloaded.swap_cuda_hooks()
        if facts.first_use_in_dispatcher:
            _install_first_use_stub(devices.dispatch_key)
            # torch.backends.mps asks the C++ hooks, which would fix them before ours register.
            backends = getattr(torch.backends, devices.device_type)
            backends.is_available = _keep_wrapped(module.is_available, backends.is_available)
            # Inductor's compile workers ask the GPU's core count and name, which only macOS builds bind.
            backends.get_core_count = _keep_wrapped(
                lambda: module.get_device_properties().multi_processor_count, backends.get_core_count)
            backends.get_name = _keep_wrapped(module.get_device_name, backends.get_name)
            if preloaded is not None:
                preloaded.register_guard_early(devices.dispatch_key, devices.count)
            else:
                _load_on_first_mention(devices.device_type)
        if facts.cuda_api:
            from . import cuda_bindings

            cuda_bindings.install(module)
        _wrap_autograd()
        _wrap_accelerator()
        _register_serialization()
        if facts.storages_need_runtime:
            _wrap_storages()


def _keep_wrapped(replacement: Any, original: Any) -> Any:
    """`replacement` as a function that keeps `original.__wrapped__`: torch 2.14 and 2.15's Dynamo read
    torch.backends.mps.is_available.__wrapped__ (the function under its cache) when it is imported."""

    def function(*args: Any, **kwargs: Any) -> Any:
        return replacement(*args, **kwargs)

    if hasattr(original, "__wrapped__"):
        function.__wrapped__ = original.__wrapped__
    return function


def device_module(device_type: str) -> Any:
    """The DeviceModule serving `device_type`, or None when it is not emulated."""
    return _modules.get(device_type)


def refuse_device(device_type: str, reason: str) -> None:
    """Make first use of `device_type` fail with `reason` (an explicit ask that cannot be served)."""
    target = getattr(torch, device_type, None)
    known = torch_device_type(device_type)
    if target is None or known is None or not known.lazy_init:
        return

    def _lazy_init() -> None:
        raise RuntimeError(f"torchplug cannot emulate '{device_type}': {reason.rstrip('.')}.")

    target._lazy_init = _lazy_init


def _register_new_device(devices: EmulatedDevices, module: Any) -> None:
    name = devices.device_type
    if torch._C._get_privateuse1_backend_name() != name:
        torch.utils.rename_privateuse1_backend(name)  # once per process; request.py checked it is free
    namespace = types.ModuleType(f"torch.{name}", f"torchplug emulated device module for '{name}'")
    for key, value in module.exports().items():
        setattr(namespace, key, value)
    torch._register_device_module(name, namespace)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def _preload_runtime() -> Any:
    """A cached build of the runtime, loaded but not configured, or None; never compiles or raises."""
    try:
        from ..extension import load_cached
        from .build import NAME, cflags, sources

        return load_cached(NAME, sources(), cflags())
    except Exception:  # the first device use builds it, or reports why it cannot
        return None


def _configure_runtime() -> None:
    from . import runtime

    runtime.ensure()


def _mentions(values: Any, device_type: str) -> bool:
    for value in values:
        if isinstance(value, torch.device) and value.type == device_type:
            return True
        if isinstance(value, str) and value.split(":", 1)[0] == device_type:
            return True
    return False


def _load_on_first_mention(device_type: str) -> None:
    """Until the runtime is built: the usual ways into a device without a lazy-init hook load it first,
    then step aside."""
    originals = [(torch.Tensor, "to"), (torch, "tensor"), (torch, "as_tensor")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in originals]

    def restore() -> None:
        for owner, name, function in saved:
            setattr(owner, name, function)

    for owner, name, function in saved:

        @functools.wraps(function)
        def loads_runtime_on_first_mention(*args: Any, __function: Any = function, **kwargs: Any) -> Any:
            if _mentions(args, device_type) or _mentions(kwargs.values(), device_type):
                from . import runtime

                runtime.ensure()
                restore()
            return __function(*args, **kwargs)

        setattr(owner, name, loads_runtime_on_first_mention)


def _wrap_accelerator() -> None:
    """torch.accelerator's functions load the runtime first (see the module docstring)."""
    global _accelerator_wrapped
    if _accelerator_wrapped:
        return
    for name in torch.accelerator.__all__:
        function = getattr(torch.accelerator, name)
        if not inspect.isfunction(function):
            continue

        @functools.wraps(function)
        def loads_runtime_first(*args: Any, __function: Any = function, **kwargs: Any) -> Any:
            from . import runtime

            runtime.extension()
            return __function(*args, **kwargs)

        setattr(torch.accelerator, name, loads_runtime_first)
    _accelerator_wrapped = True


def _install_first_use_stub(dispatch_key: str) -> None:
    if dispatch_key in _first_use_stubs:
        return
    stub = torch.library.Library("_", "IMPL")

    def first_op(op: Any, *args: Any, **kwargs: Any) -> Any:
        from . import runtime

        runtime.ensure()  # drops this stub, then registers the C++ fallback for the key
        return op(*args, **kwargs)

    stub.fallback(first_op, dispatch_key=dispatch_key)
    _first_use_stubs[dispatch_key] = stub
    from . import runtime

    # the C++ fallback takes the key over from the stub
    runtime.before_configure(dispatch_key, lambda: _drop_first_use_stub(dispatch_key))


def _drop_first_use_stub(dispatch_key: str) -> None:
    stub = _first_use_stubs.pop(dispatch_key, None)
    if stub is not None:
        stub._destroy()


def _emulated_storage_device(device: Any) -> torch.device | None:
    """`device` as a torch.device when it names an emulated type whose storages torch refuses."""
    if device is None:
        return None
    device = torch.device(device)
    module = _modules.get(device.type)
    if module is None or not by_dispatch_key(module.emulated.dispatch_key).storages_need_runtime:
        return None
    return module._device(device)


def _wrap_storages() -> None:
    """UntypedStorage(..., device=...) and resize_ on emulated cuda/mps, through device tensors."""
    global _storages_wrapped
    if _storages_wrapped:
        return
    storage_class = torch.UntypedStorage
    original_new = storage_class.__new__
    original_resize = storage_class.resize_

    def __new__(cls: type, *args: Any, device: Any = None, **kwargs: Any) -> Any:
        target = _emulated_storage_device(device)
        if target is None or cls is not storage_class or kwargs or len(args) > 1:
            return original_new(cls, *args, **({"device": device} if device is not None else {}), **kwargs)
        if args and not isinstance(args[0], int):  # a sequence of byte values
            return torch.tensor(list(args[0]), dtype=torch.uint8).to(target).untyped_storage()
        return torch.empty(args[0] if args else 0, dtype=torch.uint8, device=target).untyped_storage()

    @functools.wraps(original_resize)
    def resize_(self: Any, size: int) -> Any:
        if _emulated_storage_device(self.device) is None:
            return original_resize(self, size)
        from . import runtime

        runtime.extension().resize_storage(self._cdata, int(size))
        return self

    storage_class.__new__ = __new__
    storage_class.resize_ = resize_
    _storages_wrapped = True


def _restore_location(storage: Any, location: str) -> Any:
    """torch.load's deserializer for emulated devices: a CPU storage moved to the device."""
    device_type = location.split(":", 1)[0]
    module = _modules.get(device_type)
    if module is None:
        return None  # not ours: the next registered deserializer decides
    device = module._device(torch.device(location))  # checks the index like torch's own loaders
    host = torch.empty(0, dtype=torch.uint8).set_(storage)
    return host.to(device).untyped_storage()


def _register_serialization() -> None:
    global _serialization_registered
    if not _serialization_registered:
        # Priority 15 runs before torch's cuda (20), mps (21) and xpu (25) deserializers.
        torch.serialization.register_package(15, lambda obj: None, _restore_location)
        _serialization_registered = True


def _wrap_autograd() -> None:
    global _autograd_wrapped
    if _autograd_wrapped:
        return
    original = torch.autograd.graph._engine_run_backward

    @functools.wraps(original)
    def _engine_run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        from . import runtime

        runtime.prepare_backward(t_outputs)
        return original(t_outputs, *args, **kwargs)

    # torch.autograd imported the function by name, so both references are replaced.
    torch.autograd.graph._engine_run_backward = _engine_run_backward
    torch.autograd._engine_run_backward = _engine_run_backward
    _autograd_wrapped = True
