"""The emulation settings, read from the environment once per process.

TORCHPLUG_EMULATE=xpu,mps,cuda   backend names to emulate (opt-in; nothing is emulated without it)
TORCHPLUG_EMULATE_DEVICES=2      devices per emulated backend; or per backend: "xpu=2,mps=1". Default 1,
                                 or under torchrun LOCAL_WORLD_SIZE (one device per local rank)
TORCHPLUG_EMULATE_MEMORY=1GiB    capacity of each emulated device; or per backend: "xpu=1GiB". Unset: the
                                 emulated model's memory, as on the real GPU (no limit for a backend without
                                 a model); 0 is refused: it would be a device that can hold nothing
TORCHPLUG_EMULATE_FORCE=1        emulate even where the backend's native probe finds hardware
                                 ("1" for every listed backend, "0" for none, or a list of backend names)
TORCHPLUG_EMULATE_GPU=h100       the real model an emulated device answers as (capability, memory, SMs);
                                 or per backend: "cuda=h100,xpu=max1550". Default: each backend's own

Sizes take B, K, M, G or T, optionally followed by "iB" or "B"; every unit is a power of 1024.
This module is the one reader of these variables: the rest of torchplug asks it (and the runtime parts
outside emulation ask the extension points: part.py). Imported inside every ``import torch``:
standard library only.
"""

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

T = TypeVar("T")

VARIABLE = "TORCHPLUG_EMULATE"
DEFAULT_DEVICES = 1
MAX_DEVICES = 64  # the C++ runtime's kMaxDevices
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class EmulationConfigError(ValueError):
    """A TORCHPLUG_EMULATE* variable that cannot be read; the message names it, `fix` a valid setting."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class EmulationConfig:
    names: tuple[str, ...] = ()  # backend names, in the order listed
    devices: dict[str, int] = field(default_factory=dict)  # per backend; "*" is the default
    memory: dict[str, int] = field(default_factory=dict)  # bytes per device; "*" is the default; unset: no limit
    force: frozenset[str] = frozenset()  # backend names, or {"*"}
    gpus: dict[str, str] = field(default_factory=dict)  # model names per backend; "*" applies to any

    def requested(self, name: str) -> bool:
        return name in self.names

    def device_count(self, name: str) -> int:
        return self.devices.get(name, self.devices.get("*", DEFAULT_DEVICES))

    def capacity(self, name: str) -> int:
        return self.memory.get(name, self.memory.get("*", 0))

    def forced(self, name: str) -> bool:
        return "*" in self.force or name in self.force

    def gpu(self, name: str) -> tuple[str | None, bool]:
        """(model name asked for backend `name`, whether it was asked for that backend by name)."""
        if name in self.gpus:
            return self.gpus[name], True
        return self.gpus.get("*"), False


def parse_size(text: str, variable: str = "TORCHPLUG_EMULATE_MEMORY") -> int:
    """Bytes in `text`, e.g. '512M', '1.5GiB', '4096'; at least one byte."""
    fix = f"set {variable} to a size such as {variable}=1GiB (or per backend: {variable}=xpu=1GiB), or unset it"
    match = _SIZE.match(text)
    if not match:
        raise EmulationConfigError(
            f"{variable}: cannot read {text!r} as a size; write e.g. 512M, 1GiB or 1073741824", fix)
    size = int(float(match[1]) * _UNITS[match[2].lower()])
    if size < 1:
        raise EmulationConfigError(
            f"{variable}: {text.strip()!r} is no capacity (a device that can hold nothing); unset it for no limit, "
            "or write a size such as 1GiB", fix)
    return size


def _per_backend(value: str, parse: Callable[[str], T]) -> dict[str, T]:
    """'2' -> {'*': 2}; 'xpu=2,mps=1' -> {'xpu': 2, 'mps': 1} (a bare value sets the default)."""
    result: dict[str, T] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, sep, amount = part.partition("=")
        key = name.strip().lower() if sep else "*"
        result[key] = parse(amount if sep else name)
    return result


def _count(text: str) -> int:
    try:
        count = int(text.strip())
    except ValueError:
        count = -1
    if not 1 <= count <= MAX_DEVICES:
        raise EmulationConfigError(
            f"TORCHPLUG_EMULATE_DEVICES: {text.strip()!r} is not a device count between 1 and {MAX_DEVICES}",
            "set a count such as TORCHPLUG_EMULATE_DEVICES=2 (or per backend: TORCHPLUG_EMULATE_DEVICES=xpu=2), "
            "or unset it",
        )
    return count


def _names(value: str) -> tuple[str, ...]:
    seen: list[str] = []
    for part in value.split(","):
        name = part.strip().lower()
        if name and name not in seen:
            seen.append(name)
    return tuple(seen)


def _devices(environ: "os._Environ[str] | dict[str, str]") -> dict[str, int]:
    devices = _per_backend(environ.get("TORCHPLUG_EMULATE_DEVICES", ""), _count)
    local_ranks = environ.get("LOCAL_WORLD_SIZE", "").strip()
    if "*" not in devices and local_ranks.isdigit() and 1 <= int(local_ranks) <= MAX_DEVICES:
        # torchrun's ranks on this node: each gets its own device, so set_device(local_rank) works as on real hardware.
        devices["*"] = int(local_ranks)
    return devices


def _forced(value: str) -> frozenset[str]:
    flag = value.strip().lower()
    if flag in ("1", "true", "yes", "on", "all"):
        return frozenset({"*"})
    return frozenset() if flag in ("0", "false", "no", "off", "none") else frozenset(_names(flag))


def from_environ(environ: "os._Environ[str] | dict[str, str]") -> EmulationConfig:
    return EmulationConfig(
        names=_names(environ.get(VARIABLE, "")),
        devices=_devices(environ),
        memory=_per_backend(environ.get("TORCHPLUG_EMULATE_MEMORY", ""), parse_size),
        force=_forced(environ.get("TORCHPLUG_EMULATE_FORCE", "")),
        gpus=_per_backend(environ.get("TORCHPLUG_EMULATE_GPU", ""), lambda model: model.strip().lower()),
    )


def requested_names() -> tuple[str, ...]:
    """The backends TORCHPLUG_EMULATE lists; never raises, unlike current()."""
    return _names(os.environ.get(VARIABLE, ""))


def emulation_requested() -> bool:
    """Whether TORCHPLUG_EMULATE names any backend: without it nothing is emulated, and nothing more is imported."""
    return bool(requested_names())


@lru_cache(maxsize=1)
def current() -> EmulationConfig:
    """The process's settings. Read once: devices cannot change count once tensors exist."""
    return from_environ(os.environ)
