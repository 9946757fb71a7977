"""The device module of an emulated device type, with torch.cuda's names.

Installed onto torch.xpu / torch.cuda / torch.mps (or registered as torch.<name> for a new
device) by hooks.py. Queries that need no runtime (is_available, device_count, memory_allocated
before any tensor exists, manual_seed before first use) answer without building it; the rest
load the runtime on first call, as torch.cuda does on lazy init.
"""

import ctypes
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from . import runtime
from .emulated import EmulatedDevices
from ..entrypoints.torch_devices import by_dispatch_key
from .streams import stream_classes

Device = int | str | torch.device | None
_STAT_FIELDS = ("current", "peak", "allocated", "freed")


@dataclass(frozen=True)
class EmulatedDeviceProperties:
    """What get_device_properties reports: the emulated model's (entrypoints.EmulatedShape) answers,
    under torch.cuda's and torch.xpu's attribute names. No real hardware is behind it."""

    name: str
    type: str
    index: int
    total_memory: int
    has_fp64: bool
    has_fp16: bool
    multi_processor_count: int
    warp_size: int
    gcnArchName: str  # noqa: N815
    max_threads_per_multi_processor: int
    max_threads_per_block: int
    regs_per_multiprocessor: int
    major: int  # the model's capability: code gated on e.g. (8, 0) takes the path it takes on that GPU
    minor: int
    L2_cache_size: int  # noqa: N815
    shared_memory_per_block: int
    shared_memory_per_block_optin: int
    uuid: str  # a fixed, recognisably fake UUID per device index
    is_emulated: bool = True
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    device_id: int = 0  # PCI device id: torch 2.15's common_xpu maps it to a codename (0 is none)

    @property
    def gpu_subslice_count(self) -> int:  # torch.xpu's name for the compute-unit count
        return self.multi_processor_count

    @property
    def shared_memory_per_multiprocessor(self) -> int:
        return self.shared_memory_per_block_optin


class DeviceModule:
    """torch.cuda's API over one emulated device type."""

    def __init__(self, devices: EmulatedDevices) -> None:
        self.emulated = devices
        self.type = devices.device_type
        self._key = devices.dispatch_key
        self._torch_type = by_dispatch_key(self._key)  # what torch defines for the type (entrypoints/torch_devices.py)
        self.Stream, self.Event, self.StreamContext = stream_classes(self)
        outer = self

        class device:  # noqa: N801 - torch.cuda.device's name
            """Context manager that makes a device current; None or a negative index changes nothing."""

            def __init__(self, device: Device) -> None:
                self.index = -1 if device is None else outer._index(device)
                self.previous = -1

            def __enter__(self) -> None:
                self.previous = outer._exchange_device(self.index)

            def __exit__(self, *exc: object) -> None:
                outer._maybe_exchange_device(self.previous)

        class device_of(device):  # noqa: N801
            def __init__(self, obj: Any) -> None:
                super().__init__(obj.get_device() if obj.device.type == outer.type else -1)

        self.device, self.device_of = device, device_of

    # ---- availability and initialisation ------------------------------------------------------
    def is_available(self) -> bool:
        return True  # opt-in: only attached when TORCHPLUG_EMULATE asked for this backend

    def device_count(self) -> int:
        return self.emulated.count

    def is_initialized(self) -> bool:
        return runtime.is_configured(self.type)

    def _lazy_init(self) -> None:
        if not runtime.is_configured(self.type):
            runtime.ensure()

    init = _lazy_init

    def _is_in_bad_fork(self) -> bool:
        return False

    # ---- devices ------------------------------------------------------------------------------
    def current_device(self) -> int:
        if not runtime.is_configured(self.type):
            return 0
        return runtime.extension().current_device(self._key)

    def set_device(self, device: Device) -> None:
        index = self._index(device)
        if index >= 0:
            runtime.extension().exchange_device(self._key, index)

    def _exchange_device(self, index: int) -> int:
        if index < 0:
            return -1
        return runtime.extension().exchange_device(self._key, index)

    def _maybe_exchange_device(self, index: int) -> int:
        # A function of its own, not an alias: Dynamo keys its handlers by function and refuses a
        # second registration of the same one.
        return self._exchange_device(index)

    def synchronize(self, device: Device = None) -> None:
        index = self._index(device)  # validates; kernels already ran when they were issued
        if runtime.is_configured(self.type):
            runtime.extension().graph_check_unsafe(self._key, index, f"torch.{self.type}.synchronize()")

    def get_device_name(self, device: Device = None) -> str:
        index = self._index(device)
        return f"{self.emulated.device_name} #{index}" if self.emulated.count > 1 else self.emulated.device_name

    def get_device_properties(self, device: Device = None) -> EmulatedDeviceProperties:
        index = self._index(device)
        refused = self.emulated.refused_dtypes
        shape = self.emulated.shape  # TORCHPLUG_EMULATE_GPU's model, else the backend's default
        return EmulatedDeviceProperties(
            name=self.get_device_name(index),
            type=self.type,
            index=index,
            total_memory=self._total_memory(index),
            has_fp64=torch.float64 not in refused,
            has_fp16=torch.float16 not in refused,
            multi_processor_count=shape.compute_units,
            warp_size=shape.warp_size,
            gcnArchName=shape.arch,
            max_threads_per_multi_processor=shape.max_threads_per_compute_unit,
            max_threads_per_block=shape.max_threads_per_block,
            regs_per_multiprocessor=shape.registers_per_compute_unit,
            major=shape.capability[0],
            minor=shape.capability[1],
            L2_cache_size=shape.l2_cache_bytes,
            shared_memory_per_block=shape.shared_memory_per_block,
            shared_memory_per_block_optin=shape.shared_memory_per_block_optin,
            uuid=f"00000000-7470-6c67-656d-{index:012x}",  # "tplgem": torchplug emulated
        )

    def _total_memory(self, index: int) -> int:
        """TORCHPLUG_EMULATE_MEMORY's capacity, else the model's memory, else the host's."""
        return self.emulated.capacities[index]

    def get_device_capability(self, device: Device = None) -> tuple[int, int]:
        props = self.get_device_properties(device)
        return props.major, props.minor

    def arch_list(self) -> list[str]:
        """The architectures torch.cuda.get_arch_list() reports: the build's own where it has a CUDA
        runtime (it tells the truth about the build), else those of the emulated GPU's profile."""
        from .cuda_bindings import original

        build_flags = original("_cuda_getArchFlags")
        if build_flags is not None and build_flags():
            return build_flags().split()
        return list(self.emulated.shape.arch_list)

    # ---- memory -------------------------------------------------------------------------------
    def memory_allocated(self, device: Device = None) -> int:
        index = self._index(device)
        if not runtime.is_configured(self.type):
            return 0  # no tensor can exist before the runtime is loaded
        return runtime.extension().memory_allocated(self._key, index)

    def max_memory_allocated(self, device: Device = None) -> int:
        return self.memory_stats(device).get("allocated_bytes.all.peak", 0)

    memory_reserved = memory_allocated  # no caching allocator: reserved is what is allocated
    max_memory_reserved = max_memory_allocated

    def memory_stats_as_nested_dict(self, device: Device = None) -> dict[str, Any]:
        """torch.cuda's nested statistics, with every key its caching allocator reports.

        No block is cached: each allocation is its own segment, reserved and active bytes are the
        allocated ones, and nothing is split or inactive. The capacity is mem_get_info()'s total.
        """
        index = self._index(device)
        if not runtime.is_configured(self.type):
            return {}
        counted = runtime.extension().memory_stats(self._key, index)
        blocks, nbytes = counted["allocation"], counted["allocated_bytes"]
        nothing = {pool: dict.fromkeys(_STAT_FIELDS, 0) for pool in nbytes}
        stats: dict[str, Any] = {
            "allocation": blocks, "segment": blocks, "active": blocks, "inactive_split": nothing,
            "allocated_bytes": nbytes, "reserved_bytes": nbytes, "active_bytes": nbytes,
            "inactive_split_bytes": nothing, "requested_bytes": nbytes,
            "oversize_allocations": nothing["all"], "oversize_segments": nothing["all"],
            "num_alloc_retries": 0, "num_ooms": counted["num_ooms"], "num_sync_all_streams": 0,
            "num_device_alloc": blocks["all"]["allocated"], "num_device_free": blocks["all"]["freed"],
            "max_split_size": -1,
        }
        return stats

    def memory_stats(self, device: Device = None) -> "OrderedDict[str, int]":
        """memory_stats_as_nested_dict flattened as torch flattens it: "allocated_bytes.all.current", ..."""
        flat: list[tuple[str, int]] = []

        def add(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for key, inner in value.items():
                    add(f"{prefix}.{key}" if prefix else key, inner)
            else:
                flat.append((prefix, value))

        add("", self.memory_stats_as_nested_dict(device))
        return OrderedDict(sorted(flat))

    def reset_accumulated_memory_stats(self, device: Device = None) -> None:
        index = self._index(device)
        if runtime.is_configured(self.type):
            runtime.extension().reset_accumulated(self._key, index)

    def reset_peak_memory_stats(self, device: Device = None) -> None:
        index = self._index(device)
        if runtime.is_configured(self.type):
            runtime.extension().reset_peak(self._key, index)

    reset_max_memory_allocated = reset_peak_memory_stats

    def mem_get_info(self, device: Device = None) -> tuple[int, int]:
        index = self._index(device)
        total = self._total_memory(index)
        return max(total - self.memory_allocated(index), 0), total

    def empty_cache(self) -> None:
        """Nothing is cached: freed tensors return their memory at once (graph pools keep theirs)."""
        if runtime.is_configured(self.type):
            runtime.extension().graph_check_unsafe(self._key, self.current_device(), f"torch.{self.type}.empty_cache()")

    # ---- random numbers -----------------------------------------------------------------------
    def manual_seed(self, seed: int) -> None:
        self._seed(self.current_device(), int(seed))

    def manual_seed_all(self, seed: int) -> None:
        self._seed(-1, int(seed))

    def _seed(self, index: int, seed: int) -> None:
        seed &= 0xFFFF_FFFF_FFFF_FFFF  # torch.manual_seed accepts negative seeds the same way
        if not runtime.is_configured(self.type):
            runtime.queue_seed(self.type, index, seed)  # like torch.cuda's _lazy_call
            return
        for i in range(self.emulated.count) if index < 0 else (index,):
            runtime.extension().manual_seed(self._key, i, seed)

    def seed(self) -> None:
        runtime.extension().seed(self._key, self.current_device())

    def seed_all(self) -> None:
        value = runtime.extension().seed(self._key, 0)
        for i in range(1, self.emulated.count):
            runtime.extension().manual_seed(self._key, i, value)

    def initial_seed(self) -> int:
        return runtime.extension().initial_seed(self._key, self.current_device())

    def get_rng_state(self, device: Device = None) -> torch.Tensor:
        index = self._index(device)
        state = runtime.extension().get_rng_state(self._key, index)
        return torch.frombuffer(bytearray(state), dtype=torch.uint8)

    def set_rng_state(self, new_state: torch.Tensor, device: Device = None) -> None:
        index = self._index(device)
        state = new_state.detach().to("cpu", torch.uint8).contiguous()
        runtime.extension().set_rng_state(self._key, index, ctypes.string_at(state.data_ptr(), state.numel()))

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.emulated.count)]

    def set_rng_state_all(self, new_states: list[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            self.set_rng_state(state, i)

    # ---- streams ------------------------------------------------------------------------------
    def current_stream(self, device: Device = None) -> torch.Stream:
        index = self._index(device)
        stream_id = runtime.extension().current_stream(self._key, index)
        return self.Stream(stream_id=stream_id, device_index=index, device_type=self._torch_type.type_id)

    def default_stream(self, device: Device = None) -> torch.Stream:
        self._lazy_init()
        return self.Stream(stream_id=0, device_index=self._index(device), device_type=self._torch_type.type_id)

    def set_stream(self, stream: torch.Stream | None) -> None:
        """Make `stream` current; like torch.cuda.set_stream, its device becomes the current device."""
        if stream is not None:
            self._exchange_device(stream.device_index)
            runtime.extension().set_stream(self._key, stream.device_index, stream.stream_id)

    def stream(self, stream: torch.Stream | None) -> Any:
        return self.StreamContext(stream)

    # ---- helpers ------------------------------------------------------------------------------
    def _index(self, device: Device) -> int:
        """The device index `device` names, checked like a real runtime checks it."""
        if device is None:
            return self.current_device()
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != self.type:
                raise ValueError(f"expected a {self.type!r} device, got {str(device)!r}")
            index = self.current_device() if device.index is None else device.index
        else:
            index = int(device)
        if index < 0:
            return index
        if index >= self.emulated.count:
            raise RuntimeError(
                f"invalid device ordinal: {self.type}:{index} is out of range; torchplug's emulated "
                f"{self.type} runtime has {self.emulated.count} device(s). "
                "Set TORCHPLUG_EMULATE_DEVICES to emulate more."
            )
        return index

    def _device(self, device: Device) -> torch.device:
        return torch.device(self.type, self._index(device))

    def exports(self) -> dict[str, Any]:
        """The attributes installed on torch.<device type>."""
        names = [
            "is_available", "device_count", "is_initialized", "_lazy_init", "init", "_is_in_bad_fork",
            "current_device", "set_device", "_exchange_device", "_maybe_exchange_device", "synchronize",
            "get_device_name", "get_device_properties", "memory_allocated",
            "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats", "memory_stats_as_nested_dict",
            "reset_accumulated_memory_stats",
            "reset_peak_memory_stats", "reset_max_memory_allocated", "mem_get_info", "empty_cache",
            "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
            "set_rng_state", "get_rng_state_all", "set_rng_state_all", "current_stream", "default_stream",
            "set_stream", "stream", "Stream", "Event", "StreamContext", "device", "device_of",
        ]
        exports = {name: getattr(self, name) for name in names}
        if self._torch_type.capability:  # torch.xpu's variant returns a dict of features instead
            exports["get_device_capability"] = self.get_device_capability
        # torch.mps spells two of them differently.
        exports["current_allocated_memory"] = lambda: self.memory_allocated(0)
        exports["driver_allocated_memory"] = lambda: self.memory_allocated(0)
        return exports
