"""TORCHPLUG_EMULATE's request: deciding at autoload whether a backend runs emulated, and remembering
why (or why not). Formerly attach.py, whose attach() is emulate_if_requested().

Runs inside ``import torch`` for every backend listed in TORCHPLUG_EMULATE, so it only reads
the environment, probes cheaply and patches Python attributes; the C++ runtime is built and
loaded on first device use (runtime.py).
"""

import difflib
import os
import threading
from collections.abc import Mapping, Sequence
from typing import NoReturn

import torch

from .. import warn
from ..entrypoints.loader import warn_unknown_names
from ..entrypoints.torch_devices import PRIVATEUSE1, by_dispatch_key, sharing_backends, torch_device_type
from .emulated import EmulatedDevices, emulated_devices, record
from ..entrypoints import EmulatedShape
from .config import VARIABLE, EmulationConfig, EmulationConfigError, current, from_environ, requested_names


_lock = threading.Lock()
_forced_over_hardware: set[str] = set()  # backend names emulated by TORCHPLUG_EMULATE_FORCE although hardware answered
_declined: dict[str, tuple[str, str]] = {}  # backend name -> (why TORCHPLUG_EMULATE was not honoured, the fix)


def _build_has_runtime(device_type: str) -> str | None:
    """Why torch's own runtime for `device_type` rules emulation out, or None.

    A CUDA or ROCm build is no obstacle: where it sees no GPU, the runtime takes its CUDA kernels,
    hooks, device guard and bindings over (csrc/native_kernels.cpp, cuda_bindings.py). XPU and MPS
    builds are not installable here to prove the same, so they keep their runtime
    (TorchDeviceType.runtime_replaceable).
    """
    known = torch_device_type(device_type)
    if known is not None and not known.runtime_replaceable and known.built():
        return f"torch {torch.__version__} was built with {known.dispatch_key}, whose kernels would shadow the emulator"
    if known is None:
        taken = torch._C._get_privateuse1_backend_name()
        if taken not in (PRIVATEUSE1.name, device_type):
            return f"torch's PrivateUse1 device slot is already taken by {taken!r}"
    return None


def _never_emulated(spec) -> tuple[str, str] | None:
    """(why, fix) when `spec`'s backend cannot be emulated with this torch whatever the settings; else None."""
    if spec.device_type == "cpu":
        return "the cpu backend always runs natively; there is nothing to emulate", "leave cpu out of TORCHPLUG_EMULATE"
    if unsound := _build_has_runtime(spec.device_type):
        release = torch.__version__.split("+")[0]
        return (f"{unsound}; emulation needs a torch build without it",
                f"install the CPU wheel: pip install torch=={release} --index-url https://download.pytorch.org/whl/cpu")
    return None


def emulation_refused(backend, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(why, fix) when a process started with `environ`, which emulates `backend`, would refuse to; else None.

    For a parent about to start such processes (`torchplug check`): it says so at once, instead of
    each child after its start-up."""
    try:
        _chosen_model(backend.spec, from_environ(environ))
    except EmulationConfigError as err:
        return str(err), err.fix
    return _never_emulated(backend.spec)


_reported: set[str] = set()  # the messages of unreadable settings already shown


def _report_unreadable_settings(err: EmulationConfigError, off: str) -> None:
    """Once per message, at the user's `import torch` line: the device would otherwise just be missing."""
    message = f"torchplug: {err}; emulation of {off} is off. Fix: {err.fix}"
    if message not in _reported:
        _reported.add(message)
        warn(message)


def _refuse_and_raise(spec, err: EmulationConfigError) -> NoReturn:
    from .hooks import refuse_device

    refuse_device(spec.device_type, f"{err}. Fix: {err.fix}")
    raise err


def _decline(name: str, reason: str, fix: str) -> None:
    _declined[name] = (reason, fix)


def emulate_if_requested(backend, refused_dtypes: frozenset[torch.dtype]) -> EmulatedDevices | None:
    """Called from Backend.setup() when TORCHPLUG_EMULATE is set: emulate `backend` if asked and sound.

    `backend` is a torchplug Backend (its spec and native probe are read); `refused_dtypes` are the
    standard dtypes its device lacks, which the emulated device refuses as the real one would.
    """
    spec = backend.spec
    name = spec.name
    if name not in requested_names():
        return None
    try:
        config = current()
    except EmulationConfigError as err:  # fails the requested plugins only, loudly
        _report_unreadable_settings(err, ", ".join(requested_names()))
        _refuse_and_raise(spec, err)
    try:
        shape = _chosen_model(spec, config)
    except EmulationConfigError as err:  # this backend only
        _report_unreadable_settings(err, name)
        _refuse_and_raise(spec, err)
    with _lock:
        if never := _never_emulated(spec):
            _decline(name, *never)
            return None
        shared = sharing_backends(spec.device_type)  # backends of one torch device type on different builds
        if name in shared and all(config.requested(n) for n in shared):
            _decline(name, f"TORCHPLUG_EMULATE lists both {' and '.join(map(repr, shared))}, which share torch's one "
                           f"{spec.device_type!r} device type", "list only one of them")
            from .hooks import refuse_device

            refuse_device(spec.device_type, "; ".join(_declined[name]))
            return None
        hardware = _native_works(backend)
        if hardware and not config.forced(name):
            _decline(name, "real hardware is present and native wins",
                     f"use the hardware without TORCHPLUG_EMULATE, or set TORCHPLUG_EMULATE_FORCE={name} to emulate anyway")
            return None
        if (other := emulated_devices().get(spec.device_type)) is not None:
            _decline(name, f"backend {other.backend!r} already emulates the {spec.device_type!r} device type",
                     f"list only one backend of the {spec.device_type!r} device type in TORCHPLUG_EMULATE")
            return None
        count = config.device_count(name)
        devices = EmulatedDevices(
            backend=name,
            device_type=spec.device_type,
            dispatch_key=spec.dispatch_key,
            count=count,
            capacities=(config.capacity(name) or (shape.memory if shape else 0) or _host_memory(),) * count,
            refused_dtypes=frozenset(refused_dtypes),
            profile=spec.profile,
            shape=shape,
        )
        if hardware:
            _forced_over_hardware.add(name)
        from .hooks import install

        install(devices)
        record(devices)
        return devices



def _host_memory() -> int:
    """A device without a model holds what the host does: past it, allocations raise OutOfMemoryError
    as on a real device (the host would otherwise overcommit and let them pass)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0

def check_settings(plugins: Sequence[str]) -> None:
    """When discovery is done, at the user's ``import torch`` line: warn about each setting that names a
    backend no installed plugin provides, or a model no emulated backend has (unreadable values
    already failed the requested plugins, with a warning, in `emulate_if_requested`)."""
    warn_unknown_names(VARIABLE, requested_names(), plugins)
    try:
        config = current()
    except EmulationConfigError as err:
        _report_unreadable_settings(err, ", ".join(requested_names()))
        return
    # Examples name an emulated backend before the others.
    known = [*(n for n in config.names if n in plugins), *(n for n in plugins if n not in config.names)]
    for variable, per_backend, example in (
        ("TORCHPLUG_EMULATE_DEVICES", config.devices, "{name}=2"),
        ("TORCHPLUG_EMULATE_MEMORY", config.memory, "{name}=1GiB"),
        ("TORCHPLUG_EMULATE_FORCE", config.force, "{name} (or TORCHPLUG_EMULATE_FORCE=1 for every emulated backend)"),
    ):
        warn_unknown_names(variable, set(per_backend) - {"*"}, known, example)
    for name, model in config.gpus.items():  # the example keeps the model asked for
        if name != "*":
            warn_unknown_names("TORCHPLUG_EMULATE_GPU", [name], known, "{name}=" + model.replace("{", "{{").replace("}", "}}"))
    _check_bare_model(config)


def _check_bare_model(config: EmulationConfig) -> None:
    """A bare TORCHPLUG_EMULATE_GPU model that no emulated backend declares would change nothing."""
    model = config.gpus.get("*")
    emulated = [a for a in emulated_devices().values() if a.backend in config.names and a.backend not in config.gpus]
    if model is None or not emulated or any(a.profile.model(model) for a in emulated):
        return
    declared = [name for a in emulated for name in a.profile.model_names()]
    close = difflib.get_close_matches(model, declared, n=1)
    models = "; ".join(f"{a.backend}: {', '.join(a.profile.model_names()) or 'none'}" for a in emulated)
    example = f" e.g. TORCHPLUG_EMULATE_GPU={(close or declared)[0]}." if declared else ""
    warn(f"TORCHPLUG_EMULATE_GPU names model {model!r}, which no emulated backend has"
         f"{f' (did you mean {close[0]!r}?)' if close else ''}, so it is ignored. Models: {models};{example}")


def _chosen_model(spec, config: EmulationConfig) -> EmulatedShape:
    """The model TORCHPLUG_EMULATE_GPU asks `spec`'s backend to be, else its default shape.

    A model named for this backend by name must be one it declares. A bare model applies to each
    emulated backend that declares it (model names name one kind of device), and must be declared
    by at least the one backend when it is the only one emulated."""
    wanted, by_name = config.gpu(spec.name)
    if wanted is None:
        return spec.profile.shape
    found = spec.profile.model(wanted)
    if found is None and (by_name or config.names == (spec.name,)):
        known = ", ".join(spec.profile.model_names()) or "none (the backend declares no models)"
        raise EmulationConfigError(
            f"TORCHPLUG_EMULATE_GPU: backend {spec.name!r} has no model {wanted!r}; it can be: {known}",
            f"set TORCHPLUG_EMULATE_GPU to one of them, e.g. TORCHPLUG_EMULATE_GPU={spec.name}="
            f"{(spec.profile.model_names() or ['<model>'])[0]}, or unset it",
        )
    return found or spec.profile.shape


def _native_works(backend) -> bool:
    try:
        return backend.native_unavailable_reason() is None
    except Exception:  # a probe that raises means no usable hardware
        return False


def status_for(backend) -> tuple[str, str, str] | None:
    """(mode, reason, fix) when TORCHPLUG_EMULATE concerns `backend`, else None (its native probe decides)."""
    name, device_type = backend.spec.name, backend.spec.device_type
    devices = emulated_devices().get(device_type)
    if devices is not None and devices.backend == name:
        return "emulated", _emulated_reason(devices), ""
    if devices is not None:  # its native probe would be answered by the emulation
        return ("unavailable", f"the {device_type!r} device type is emulated here for backend {devices.backend!r}",
                f"emulate {name!r} instead: TORCHPLUG_EMULATE={name}")
    if name not in _declined or _native_works(backend):
        return None
    reason, fix = _declined[name]
    try:
        native = backend.native_unavailable_reason()
    except Exception as err:
        native = f"availability probe raised {type(err).__name__}: {err}"
    return "unavailable", f"{native}; TORCHPLUG_EMULATE asked for it, but {reason}", fix


def _emulated_reason(devices: EmulatedDevices) -> str:
    how = (f"TORCHPLUG_EMULATE={devices.backend}: {devices.count} host-memory device(s) named "
           f"{devices.device_name!r}; kernels run on the CPU")
    facts = by_dispatch_key(devices.dispatch_key)
    if not facts.runtime_replaceable:
        return how
    key, module = facts.dispatch_key, facts.name
    if not facts.built():
        return (f"{how}; torch's {key} hooks become torchplug's on first use (this torch has no {key} runtime), "
                f"which makes autograd, AMP and torch.{module} serve it")
    why = ("TORCHPLUG_EMULATE_FORCE: a GPU is present but left unused" if devices.backend in _forced_over_hardware
           else f"this {key} build sees no GPU")
    return (f"{how}; {why}, so on first use torch's {key} kernels, hooks, device guard and torch._C._{module}_* "
            "bindings become the emulator's")
