"""torch.<name> for a device bound to its runtime, with torch.cuda's names.

Streams and events are torch's own (torch.Stream / torch.Event), served by the binding's device
guard; each device's random numbers come from a generator of its own (a CPU generator: the device's
random ops run torch's CPU kernels), apart from the CPU's.
"""

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import bound

Device = torch.device | str | int | None
PRIVATEUSE1_TYPE = 20  # c10::DeviceType::PrivateUse1, as torch.Stream(device_type=...) takes it
_PRIVATE_EXPORTS = ("_lazy_init", "_is_in_bad_fork", "_exchange_device", "_maybe_exchange_device")  # torch.cuda's too
_registered: dict[str, "DeviceModule"] = {}  # device type -> the module behind torch.<device type>


def register(backend: Any) -> types.ModuleType:
    """`backend`'s device module, kept for `registered`, as the namespace torch.<device type> becomes."""
    module = DeviceModule(backend)
    _registered[module.type] = module
    return module.namespace()


def registered(device_type: str) -> "DeviceModule | None":
    """The DeviceModule behind torch.<device_type>, when the binding registered it."""
    return _registered.get(device_type)


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int
    multi_processor_count: int
    major: int
    minor: int
    warp_size: int


class DeviceModule:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.type = backend.spec.device_type
        module = self

        class Stream(torch.Stream):
            def __new__(cls, device: Device = None, priority: int = 0, **kwargs: Any) -> "Stream":
                return super().__new__(cls, device=module._device(device), priority=priority, **kwargs)

        class device:  # noqa: N801 -- torch.cuda.device's name
            def __init__(self, device: Device) -> None:
                self.index = module._index(device)
                self.previous = -1

            def __enter__(self) -> None:
                self.previous = module.current_device()
                module.set_device(self.index)

            def __exit__(self, *exc: object) -> None:
                module.set_device(self.previous)

        self.Stream, self.device = Stream, device
        self.Event = torch.Event  # torch's C++ accepts only torch.Event itself (elapsed_time, wait)

    def _ext(self) -> Any:
        return bound.extension(self.backend)

    def _index(self, device: Device) -> int:
        if device is None:
            return self.current_device()
        if isinstance(device, int):
            return device
        device = torch.device(device)
        if device.type != self.type:
            raise ValueError(f"torch.{self.type}: expected a '{self.type}' device, got {device}")
        return self.current_device() if device.index is None else device.index

    def _device(self, device: Device) -> torch.device:
        return torch.device(self.type, self._index(device))

    # -- devices ---------------------------------------------------------------------------------
    def is_available(self) -> bool:
        return self.backend.is_available()

    def is_initialized(self) -> bool:
        return bound.is_bound()

    def _lazy_init(self) -> None:  # torch's C++ calls it before the first tensor on the device
        self._ext()

    def init(self) -> None:
        self._ext()

    def device_count(self) -> int:
        return self._ext().device_count() if self.is_available() else 0

    def current_device(self) -> int:
        return self._ext().current_device()

    def set_device(self, device: Device) -> None:
        index = self._index(device)
        if index >= 0:
            self._ext().set_device(index)

    def _exchange_device(self, index: int) -> int:  # torch.cuda's: Dynamo's device guard calls it
        if index < 0:
            return -1
        previous = self.current_device()
        if index != previous:
            self.set_device(index)
        return previous

    def _maybe_exchange_device(self, index: int) -> int:
        # A function of its own, not an alias: Dynamo keys its handlers by function.
        return self._exchange_device(index)

    def synchronize(self, device: Device = None) -> None:
        self._ext().synchronize(self._index(device))

    def get_device_properties(self, device: Device = None) -> DeviceProperties:
        return DeviceProperties(**self._ext().properties(self._index(device)))

    def get_device_name(self, device: Device = None) -> str:
        return self.get_device_properties(device).name

    def get_device_capability(self, device: Device = None) -> tuple[int, int]:
        found = self.get_device_properties(device)
        return found.major, found.minor

    # -- memory ----------------------------------------------------------------------------------
    def memory_allocated(self, device: Device = None) -> int:
        return self._ext().memory_allocated(self._index(device))

    def max_memory_allocated(self, device: Device = None) -> int:
        return self._ext().max_memory_allocated(self._index(device))

    def reset_peak_memory_stats(self, device: Device = None) -> None:
        self._ext().reset_peak(self._index(device))

    def mem_get_info(self, device: Device = None) -> tuple[int, int]:
        """(free, total) bytes: the runtime's total_memory less what torch holds on the device."""
        total = self.get_device_properties(device).total_memory
        return total - self.memory_allocated(device), total

    def empty_cache(self) -> None:
        """Nothing is cached: blocks go back to the runtime when freed."""

    # -- host kernels ----------------------------------------------------------------------------
    def host_launches(self, device: Device = None) -> int:
        """How many host kernels the runtime's launch_host has run on the device: torch's CPU kernels of the
        backend's host_kernels() ops, and the C++ kernels torch.compile generates."""
        return self._ext().host_launches(self._index(device))

    # -- random numbers: each device's own generator (csrc/hooks.cpp) ---------------------------------
    def manual_seed(self, seed: int) -> None:
        device = self.current_device() if bound.is_bound() else 0
        bound.when_bound(lambda ext: ext.manual_seed(device, int(seed)))

    def manual_seed_all(self, seed: int) -> None:
        bound.when_bound(lambda ext: [ext.manual_seed(device, int(seed)) for device in range(ext.device_count())])

    def seed(self) -> None:
        device = self.current_device() if bound.is_bound() else 0
        bound.when_bound(lambda ext: ext.seed(device))

    def seed_all(self) -> None:
        bound.when_bound(lambda ext: [ext.seed(device) for device in range(ext.device_count())])

    def initial_seed(self) -> int:
        return self._ext().initial_seed(self.current_device())

    def get_rng_state(self, device: Device = None) -> torch.Tensor:
        return self._ext().get_rng_state(self._index(device))

    def set_rng_state(self, new_state: torch.Tensor, device: Device = None) -> None:
        self._ext().set_rng_state(self._index(device), new_state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state(device) for device in range(self.device_count())]

    def set_rng_state_all(self, new_states: list[torch.Tensor]) -> None:
        for device, state in enumerate(new_states):
            self.set_rng_state(state, device)

    def _is_in_bad_fork(self) -> bool:  # torch.manual_seed seeds a device module that has it and manual_seed_all
        return False

    # -- streams ---------------------------------------------------------------------------------
    def current_stream(self, device: Device = None) -> torch.Stream:
        self._ext()
        return torch.accelerator.current_stream(self._device(device))

    def default_stream(self, device: Device = None) -> torch.Stream:
        self._ext()
        return torch.Stream(stream_id=0, device_index=self._index(device), device_type=PRIVATEUSE1_TYPE)

    def set_stream(self, stream: torch.Stream) -> None:
        torch.accelerator.set_stream(stream)

    @contextlib.contextmanager
    def stream(self, stream: torch.Stream | None) -> Iterator[None]:
        if stream is None:
            yield
            return
        previous = self.current_stream(stream.device)
        self.set_stream(stream)
        try:
            yield
        finally:
            self.set_stream(previous)

    # -- autocast --------------------------------------------------------------------------------
    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [d for d in (torch.float16, torch.bfloat16) if d in self.backend.spec.dtypes]

    def is_bf16_supported(self) -> bool:
        return torch.bfloat16 in self.backend.spec.dtypes

    def exports(self) -> dict[str, Any]:
        names = [name for name in dir(self) if not name.startswith("__") and name not in ("backend", "type", "exports")]
        return {name: getattr(self, name) for name in names
                if not name.startswith("_") or name in _PRIVATE_EXPORTS}

    def namespace(self) -> types.ModuleType:
        module = types.ModuleType(f"torch.{self.type}", f"torchplug device module for '{self.type}' (its own runtime)")
        for key, value in self.exports().items():
            setattr(module, key, value)
        return module
