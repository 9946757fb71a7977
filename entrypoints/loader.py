"""Plugin discovery and the exception-safe autoload that ``import torch`` runs.

Every plugin declares two entry points: one in `GROUP` naming its Backend object, and one in
torch's ``torch.backends`` group naming `autoload` below. torch calls `autoload` once per plugin at
the end of ``import torch``; the first call discovers and loads every plugin, the rest return at
once. A failing plugin is recorded with its reason and never breaks ``import torch`` (unless
TORCHPLUG_STRICT=1). Asking for that device later through `backend()` raises the recorded reason
with the fix.
"""

import difflib
import functools
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, PackageMetadata, distributions, entry_points
from pathlib import Path
from typing import Literal

import torch

from .. import TORCH_RANGE, warn
from .. import __version__ as torchplug_version
from . import extensions
from .backend import Backend
from .versions import REQUIREMENT, InvalidRange, install_torch_command, lower_bound_first, version_in_range

GROUP = "torchplug.devices"
Status = Literal["loaded", "failed", "incompatible", "skipped", "pending"]


class PluginError(RuntimeError):
    """A plugin that was asked for explicitly cannot be used; the message says why and the fix."""


@dataclass
class PluginRecord:
    name: str  # the entry point name, which is the backend name
    distribution: str
    version: str
    target: str  # the entry point value, e.g. "torchplug_xpu:backend"
    status: Status = "pending"
    reason: str = ""
    fix: str = ""
    traceback: str = ""
    load_ms: float = 0.0
    backend: Backend | None = field(default=None, repr=False)
    entry_point: EntryPoint | None = field(default=None, repr=False)
    requires: tuple[str, ...] = field(default=(), repr=False)  # the distribution's Requires-Dist


_lock = threading.RLock()
_records: dict[str, PluginRecord] = {}
_discovered = False
_discovering = False
# torch calls every entry point of its TORCH_GROUP in turn; those of torchplug plugins name `autoload`.
TORCH_GROUP = "torch.backends"
_AUTOLOAD_TARGETS = ("torchplug.entrypoints:autoload", "torchplug.entrypoints.loader:autoload")
_autoload_calls = 0  # torch's calls of autoload so far (not counting calls made while discovering)


def autoload() -> None:
    """The ``torch.backends`` entry point of every torchplug plugin.

    torch calls it once per entry point, in the order of ``entry_points(group="torch.backends")``; the
    first call loads every plugin. When torch's call raises, torch's error names the entry point it was
    calling, so under TORCHPLUG_STRICT=1 the call that raises is the one for a failed plugin's entry
    point (or the last one, for a failed plugin whose distribution declares none).
    """
    global _autoload_calls
    with _lock:
        counted = not _discovering  # a plugin re-entering torch's autoload while it is imported is not torch's loop
        call, _autoload_calls = _autoload_calls, _autoload_calls + counted
        _discover()
        if counted and _env_flag("TORCHPLUG_STRICT"):
            _raise_on_failures(call)


def discover() -> dict[str, PluginRecord]:
    """Discover and load the installed plugins once; later calls return the records."""
    with _lock:
        found = _discover()
        if not _discovering and _env_flag("TORCHPLUG_STRICT"):
            _raise_on_failures()
        return found


def _discover() -> dict[str, PluginRecord]:
    global _discovered, _discovering
    with _lock:
        if _discovering:  # a plugin re-entered autoload while being imported
            return dict(_records)
        _discovering = True
        try:
            if not _discovered:
                _discover_all()
                _discovered = True
            else:
                for record in _records.values():
                    if record.status == "pending":
                        _load(record)
        finally:
            _discovering = False
        return dict(_records)


def loaded() -> list[str]:
    """Names of the plugins that loaded, in discovery order."""
    return [name for name, record in discover().items() if record.status == "loaded"]


def records() -> list[PluginRecord]:
    return list(discover().values())


def load(name: str) -> Backend:
    """Load one plugin now, even if the environment skipped it; raise PluginError if it fails."""
    with _lock:
        record = installed(name)
        if record.status != "loaded":
            _load(record)
        if record.status != "loaded":
            raise PluginError(_explain(record))
        assert record.backend is not None
        return record.backend


def loaded_backend(name: str) -> Backend:
    """The loaded backend called `name`, whether or not its device is usable here."""
    record = installed(name)
    if record.status != "loaded":
        raise PluginError(_explain(record))
    assert record.backend is not None
    return record.backend


def backend(name: str) -> Backend:
    """The backend for an explicitly requested device; raises PluginError with the fix."""
    found = loaded_backend(name)
    status = found.status()
    if status.mode == "unavailable":
        raise PluginError(f"torchplug device {name!r} is unavailable: {status.reason}. Fix: {status.fix_for(name)}.")
    return found


def installed(name: str) -> PluginRecord:
    """The installed plugin `name`'s record; PluginError naming what is installed, and how to install it, if none."""
    records_now = discover()
    if name not in records_now:
        hint = _did_you_mean(name, records_now)
        raise PluginError(
            f"no torchplug plugin named {name!r} is installed{hint}. "
            f"Installed: {', '.join(records_now) or 'none'}. Fix: {install_hint(name)}."
        )
    return records_now[name]


@functools.cache
def repository_plugins() -> tuple[str, ...]:
    """The plugins in this repository's devices/ folders, one per folder with a pyproject.toml: the one
    source of the list. The core ships those files (pyproject.toml's package data), so a copy installed
    from a checkout knows them too. No torchplug distribution is published on a package index, so an
    install hint names a folder, and only for these names."""
    devices = Path(__file__).resolve().parents[1] / "devices"
    return tuple(sorted(path.parent.name for path in devices.glob("*/pyproject.toml")))


def install_hint(name: str) -> str:
    """How to install the plugin `name`: from this repository's folder if it is one of its plugins."""
    if name in repository_plugins():
        return (f"from a torchplug checkout, pip install ./devices/{name} (into an environment without "
                f"torchplug yet, core first: pip install ./ ./devices/{name})")
    return "install the plugin distribution that provides it"


def _plugin_entry_points() -> list[tuple[EntryPoint, PackageMetadata]]:
    """The GROUP entry points with their distribution's metadata, parsed once per distribution (and,
    from the same scan, the extension points, which are handed to extensions.py).

    importlib.metadata.entry_points() parses every installed distribution's metadata, which costs
    3x more inside ``import torch``. As there, the first distribution of a name on sys.path wins.
    """
    seen, points, extension_points = set(), [], []
    for dist in distributions():
        text = dist.read_text("entry_points.txt")
        if not text or (f"[{GROUP}]" not in text and f"[{extensions.GROUP}]" not in text):
            continue
        metadata = dist.metadata  # re-parsed on every access: read it once
        key = _normalized(metadata["Name"])
        if key not in seen:
            seen.add(key)
            declared = dist.entry_points  # parsed on every access: read it once
            points.extend((ep, metadata) for ep in declared if ep.group == GROUP)
            extension_points.extend(ep for ep in declared if ep.group == extensions.GROUP)
    extensions.declare(extension_points)  # the same scan serves the runtime parts' extension points
    return sorted(points, key=lambda pair: pair[0].name)


def _discover_all() -> None:
    points = _plugin_entry_points()
    names = [ep.name for ep, _ in points]
    wanted = _env_names("TORCHPLUG_DEVICES", names)
    disabled = _env_names("TORCHPLUG_DISABLE", names)
    autoload_on = os.getenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1"
    for ep, metadata in points:
        record = PluginRecord(ep.name, metadata["Name"], metadata["Version"], ep.value, entry_point=ep,
                              requires=tuple(metadata.get_all("Requires-Dist") or ()))
        if ep.name in _records:  # two distributions claim one backend name: first (sorted) wins
            record.status, record.reason = "failed", (
                f"backend name {ep.name!r} is also provided by {_records[ep.name].distribution}"
            )
            record.fix = f"pip uninstall one of {_records[ep.name].distribution}, {record.distribution}"
            _records[f"{ep.name}@{record.distribution}"] = record
            continue
        _records[ep.name] = record
        if not autoload_on:
            _skip(record, "TORCH_DEVICE_BACKEND_AUTOLOAD=0", "unset TORCH_DEVICE_BACKEND_AUTOLOAD")
        elif wanted is not None and ep.name not in wanted:
            _skip(record, f"not listed in TORCHPLUG_DEVICES={os.environ['TORCHPLUG_DEVICES']}",
                  f"add {ep.name!r} to TORCHPLUG_DEVICES")
        elif disabled is not None and ep.name in disabled:
            _skip(record, f"listed in TORCHPLUG_DISABLE={os.environ['TORCHPLUG_DISABLE']}",
                  f"remove {ep.name!r} from TORCHPLUG_DISABLE")
        else:
            _load(record)
    _check_environment(names)


def _check_environment(names: list[str]) -> None:
    """Each runtime part names its own unreadable settings now, at ``import torch``, not hours later."""
    for part in extensions.implementing("check_environment"):
        try:
            part.check_environment(names)
        except Exception as err:  # never break `import torch`
            warn(f"torchplug: checking the settings of extension {part.name!r} ({type(part).__name__}) raised "
                 f"{type(err).__name__}: {err}")


def _skip(record: PluginRecord, reason: str, fix: str) -> None:
    record.status, record.reason = "skipped", f"skipped: {reason}"
    record.fix = f"{fix}, or call torchplug.entrypoints.load({record.name!r})"


def _load(record: PluginRecord) -> None:
    """Import, validate and set up one plugin, recording any failure instead of raising."""
    ep = record.entry_point
    assert ep is not None
    start = time.perf_counter()
    try:
        problem = _incompatibility(record)
        if problem:
            record.status, (record.reason, record.fix) = "incompatible", problem
            return
        try:
            obj = ep.load()
        except Exception:
            module = sys.modules.get(ep.module)
            if module is not None and getattr(module.__spec__, "_initializing", False):
                # The plugin module itself is being imported (it imported torch first, which
                # autoloaded it): finish loading it on the next torchplug call.
                record.status, record.reason = "pending", "its module was still being imported"
                return
            raise
        _register(record, obj)
    except Exception as err:
        in_setup = record.status == "loaded"  # _register records the backend before it calls setup()
        record.backend, record.status = None, "failed"
        record.reason = f"{'its setup() raised ' if in_setup else ''}{type(err).__name__}: {err}"
        record.traceback = "".join(traceback.format_exception(err, limit=-6))
        # An error caused by the user's settings says how to fix them (e.g. EmulationConfigError).
        record.fix = getattr(err, "fix", None) or (
            (f"{record.distribution}'s setup() must succeed on any machine, with or without its hardware (work "
             f"that needs the device waits for its first use): report it to its authors" if in_setup
             else f"reinstall or upgrade {record.distribution}")
            + f", or set TORCHPLUG_DISABLE={record.name} to skip it; 'torchplug list --verbose' shows the traceback"
        )
    finally:
        record.load_ms = (time.perf_counter() - start) * 1e3


def _register(record: PluginRecord, obj: object) -> None:
    """Validate the plugin's shape when it registers, not when it is first used."""
    if not isinstance(obj, Backend):
        raise TypeError(f"entry point {record.target!r} gave {type(obj).__name__}, not a torchplug Backend")
    spec = getattr(type(obj), "spec", None)
    if spec is None or spec.name != record.name:
        raise TypeError(
            f"{type(obj).__name__}.spec must be a BackendSpec named {record.name!r} "
            f"(the entry point name), got {spec!r}"
        )
    spec.validate(torch.__version__)
    # Loaded before setup(), so that setup() can register kernels through torchplug's dispatcher;
    # if setup() raises, _load records the plugin as failed.
    record.backend, record.status, record.reason, record.fix = obj, "loaded", "", ""
    obj.setup()


def _incompatibility(record: PluginRecord) -> tuple[str, str] | None:
    """Check the plugin's declared torch and torchplug ranges before importing it."""
    installed = {"torch": torch.__version__, "torchplug": torchplug_version}
    for requirement in record.requires:
        match = REQUIREMENT.match(requirement)
        if not match or (match[3] and "extra" in match[3]):
            continue
        name, specifier = match[1].lower(), lower_bound_first(match[2])
        if name not in installed:
            continue
        try:
            if version_in_range(installed[name], specifier):
                continue
        except InvalidRange as err:
            return f"declares an unreadable {name} range: {err}", f"fix {record.distribution}'s metadata"
        if name == "torch":
            return _unsupported_torch(specifier, f"{record.distribution} {record.version}")
        return (
            f"requires {name}{specifier}, but {name} {installed[name]} is installed",
            f"install a {record.distribution} release built for {name} {installed[name]}",
        )
    if not version_in_range(torch.__version__, TORCH_RANGE):  # the core's own reach into torch internals
        return _unsupported_torch(TORCH_RANGE, f"torchplug {torchplug_version}")
    return None


def _unsupported_torch(specifier: str, tested_by: str) -> tuple[str, str]:
    return (
        f"torch {torch.__version__} is installed, but {tested_by} supports torch{specifier} (the range it is tested on)",
        f"install a supported torch: {install_torch_command(specifier)}",
    )


def _explain(record: PluginRecord) -> str:
    return (
        f"torchplug plugin {record.name!r} ({record.distribution} {record.version}) is "
        f"{record.status}: {record.reason}. Fix: {record.fix}."
    )


def _raise_on_failures(torch_call: int | None = None) -> None:
    """Under TORCHPLUG_STRICT=1, raise if a plugin failed. During torch's loop (`torch_call`, the index of
    its call among torchplug's entry points) only from the call torch will name in its own error: one
    for a failed plugin's entry point, or the last."""
    failures = [r for r in _records.values() if r.status in ("failed", "incompatible")]
    if not failures:
        return
    if torch_call is not None:
        ours = [ep for ep in entry_points(group=TORCH_GROUP) if ep.value.replace(" ", "") in _AUTOLOAD_TARGETS]
        failed = {_normalized(r.distribution) for r in failures}
        if torch_call < len(ours) - 1 and _distribution_name(ours[torch_call]) not in failed:
            return  # a later call is for a failed plugin (or is the last): torch's error will name that one
    names = ", ".join(f"{r.name} ({r.distribution})" for r in failures)
    raise PluginError(
        f"TORCHPLUG_STRICT=1 and these torchplug plugins failed to load: {names}\n"
        + "\n".join(f"  {_explain(r)}\n{r.traceback}" for r in failures)
    )


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _distribution_name(ep: EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return None if dist is None else _normalized(dist.metadata["Name"])


def _env_names(var: str, known: list[str]) -> set[str] | None:
    """The names listed in a comma-separated variable; unknown ones get a did-you-mean warning."""
    value = os.environ.get(var)
    if value is None:
        return None
    names = {part.strip().lower() for part in value.split(",") if part.strip()}
    warn_unknown_names(var, names, known)
    return names


def warn_unknown_names(variable: str, names: Iterable[str], known: Sequence[str], example: str = "{name}") -> None:
    """Warn, at the user's line, about each of `names` that is not an installed plugin in `known`: with a
    did-you-mean and a valid setting, `variable`=`example` formatted with the closest name (else known[0])."""
    for name in sorted(set(names) - set(known)):
        close = difflib.get_close_matches(name, list(known), n=1)
        valid = f"; e.g. {variable}={example.format(name=(close or known)[0])}" if known else ""
        warn(f"{variable} names {name!r}, but no installed torchplug plugin provides it"
             f"{_did_you_mean(name, known)}, so it is ignored. Installed: {', '.join(sorted(known)) or 'none'}{valid}.")


def _did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _env_flag(var: str) -> bool:
    return os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
