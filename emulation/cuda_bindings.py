"""torch._C's private CUDA bindings, answered by the emulated runtime when 'cuda' is emulated.

torch.cuda's own Python (and torch's test harness, Dynamo and Inductor) calls private bindings:
torch._C._cuda_getDevice, _cuda_setStream, _cuda_memoryStats, ... A CPU wheel lacks them, so
that code fails on emulated cuda; a CUDA build has them, and they reach a driver that is not
there. Both builds get the same emulated bindings, so torch's own functions run unchanged on the
emulated device: torch.cuda.memory_summary(), torch.cuda.random.get_rng_state(), the test
harness's non-default stream. Each binding either answers as the runtime of a real GPU would
(faithful), or is a documented no-op where the emulated device has nothing to do (a host
synchronous device needs no synchronisation, has no IPC handles and no BLAS handle). A binding
this table does not name keeps torch's own behaviour: absent on a CPU wheel (AttributeError), the
CUDA library's error on a CUDA build. docs/emulation.md's inventory lists every one.

Module-level aliases that torch.cuda's submodules took with ``from torch._C import ...`` are
replaced too, so the submodules agree with torch.cuda.
"""

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from . import aliases, runtime

# The emulated device's clock, for torch.cuda._sleep(cycles): an A100's boost clock.
_CLOCK_HZ = 1.41e9

class Bindings:
    """The emulated answers of torch._C's _cuda_* bindings over one DeviceModule."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.sync_debug_mode = 0
        self.memory_fraction: dict[int, float] = {}

    # ---- devices ------------------------------------------------------------------------------
    def _cuda_getDeviceCount(self) -> int:  # noqa: N802 - torch's names
        return self.module.device_count()

    def _cuda_getDevice(self) -> int:  # noqa: N802
        return self.module.current_device()

    def _cuda_setDevice(self, device: int) -> None:  # noqa: N802
        self.module.set_device(device)

    def _cuda_exchangeDevice(self, device: int) -> int:  # noqa: N802
        return self.module._exchange_device(device)

    def _cuda_maybeExchangeDevice(self, device: int) -> int:  # noqa: N802
        return self.module._exchange_device(device)

    def _cuda_init(self) -> None:
        self.module._lazy_init()

    def _cuda_isInBadFork(self) -> bool:  # noqa: N802
        return False  # host memory survives fork: a forked child can use the device

    def _cuda_hasPrimaryContext(self, device: int) -> bool:  # noqa: N802
        return runtime.is_configured(self.module.type) and 0 <= device < self.module.device_count()

    def _cuda_canDeviceAccessPeer(self, device: int, peer: int) -> bool:  # noqa: N802
        self.module._index(device), self.module._index(peer)
        return device != peer  # one host memory: every device reaches every other, as over NVLink

    def _cuda_getArchFlags(self) -> str:  # noqa: N802
        return " ".join(self.module.arch_list())

    def _cuda_synchronize(self) -> None:
        """Kernels ran when they were issued."""

    def _cuda_ipc_collect(self) -> None:
        """No memory is shared with other processes through CUDA IPC handles."""

    def _cuda_sleep(self, cycles: int) -> None:
        time.sleep(cycles / _CLOCK_HZ)  # a GPU spins asynchronously; this device runs everything at once

    def _cuda_get_sync_debug_mode(self) -> int:
        return self.sync_debug_mode

    def _cuda_set_sync_debug_mode(self, mode: int) -> None:
        """Recorded and reported back; the emulated device does not flag synchronising calls."""
        self.sync_debug_mode = int(mode)

    # ---- streams ------------------------------------------------------------------------------
    def _stream_triple(self, stream: torch.Stream) -> tuple[int, int, int]:
        return stream.stream_id, stream.device_index, stream.device_type

    def _cuda_getCurrentStream(self, device: int) -> tuple[int, int, int]:  # noqa: N802
        return self._stream_triple(self.module.current_stream(None if device < 0 else device))

    def _cuda_getDefaultStream(self, device: int) -> tuple[int, int, int]:  # noqa: N802
        return self._stream_triple(self.module.default_stream(None if device < 0 else device))

    def _cuda_setStream(self, stream_id: int, device_index: int, device_type: int) -> None:  # noqa: N802
        stream = self.module.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        self.module.set_stream(stream)

    def _cuda_getCurrentRawStream(self, device: int) -> int:  # noqa: N802
        """The null stream: emulated kernels take no stream argument."""
        self.module._index(None if device < 0 else device)
        return 0

    def _cuda_getCurrentBlasHandle(self) -> int:  # noqa: N802
        """0: the CPU kernels behind the emulated device use no cuBLAS handle."""
        return 0

    def _cuda_isCurrentStreamCapturing(self) -> bool:  # noqa: N802
        return False

    # ---- kernels ------------------------------------------------------------------------------
    def _cuda_jiterator_compile_and_launch_kernel(  # noqa: N802
            self, code_string: str, kernel_name: str, return_by_ref: bool, num_outputs: int,
            tensors: tuple[torch.Tensor, ...], kwargs: dict[str, Any] | None = None) -> Any:
        """torch.cuda.jiterator's kernels, compiled for the host (jiterator.py)."""
        from .jiterator import compile_and_launch

        return compile_and_launch(code_string, kernel_name, return_by_ref, num_outputs, tensors, kwargs)

    # ---- memory -------------------------------------------------------------------------------
    def _cuda_memoryStats(self, device: int) -> dict[str, Any]:  # noqa: N802
        return self.module.memory_stats_as_nested_dict(device)

    def _cuda_resetPeakMemoryStats(self, device: int) -> None:  # noqa: N802
        self.module.reset_peak_memory_stats(device)

    def _cuda_resetAccumulatedMemoryStats(self, device: int) -> None:  # noqa: N802
        self.module.reset_accumulated_memory_stats(device)

    def _cuda_emptyCache(self) -> None:  # noqa: N802
        """Nothing is cached: freed tensors return their memory at once."""

    def _cuda_memorySnapshot(self, *args: Any) -> dict[str, Any]:  # noqa: N802
        """No segments to show: blocks are not cached or pooled (the allocator trace is not recorded)."""
        return {"segments": [], "device_traces": [[] for _ in range(self.module.device_count())]}

    def _cuda_getAllocatorBackend(self) -> str:  # noqa: N802
        return "native"  # torch's own allocator, not cudaMallocAsync: reserved >= allocated holds

    def _cuda_setMemoryFraction(self, fraction: float, device: int) -> None:  # noqa: N802
        """Recorded; the capacity is TORCHPLUG_EMULATE_MEMORY."""
        self.memory_fraction[device] = float(fraction)

    def _cuda_getMemoryFraction(self, device: int) -> float:  # noqa: N802
        return self.memory_fraction.get(device, 1.0)

    def _cuda_cudaCachingAllocator_is_enabled(self) -> bool:  # noqa: N802
        return True

    def _cuda_hostMemoryStats(self) -> dict[str, Any]:  # noqa: N802
        """Pinned memory is plain host memory: no host-allocator statistics are kept."""
        return {}

    def _cuda_resetPeakHostMemoryStats(self) -> None:  # noqa: N802
        """Pinned memory is plain host memory: no host-allocator statistics are kept."""

    def _cuda_resetAccumulatedHostMemoryStats(self) -> None:  # noqa: N802
        """Pinned memory is plain host memory: no host-allocator statistics are kept."""

    def _cuda_clearCublasWorkspaces(self) -> None:  # noqa: N802
        """No cuBLAS workspaces exist."""

    # ---- the table ----------------------------------------------------------------------------
    # The bindings with nothing to do on a host-synchronous device (each docstring says why); the
    # rest answer as a GPU's runtime would.
    NO_OPS = frozenset({
        "_cuda_synchronize", "_cuda_ipc_collect", "_cuda_set_sync_debug_mode", "_cuda_getCurrentRawStream",
        "_cuda_getCurrentBlasHandle", "_cuda_emptyCache", "_cuda_memorySnapshot", "_cuda_setMemoryFraction",
        "_cuda_resetPeakHostMemoryStats", "_cuda_resetAccumulatedHostMemoryStats", "_cuda_clearCublasWorkspaces",
        "_cuda_hostMemoryStats",
    })

    def table(self) -> dict[str, Callable[..., Any]]:
        """torch._C name -> emulated binding."""
        return {name: getattr(self, name) for name in dir(type(self)) if name.startswith("_cuda_")}


_originals: dict[str, Callable[..., Any]] = {}  # torch's own bindings (a CUDA build's), by name


def original(name: str) -> Callable[..., Any] | None:
    """torch's own binding `name`, as it was before install(), or None where the build lacks it."""
    return _originals.get(name, getattr(torch._C, name, None) if not _originals else None)


class Nvtx:
    """torch._C._nvtx for a torch without it (the CPU wheel): ranges and marks with NVTX's return values
    (the nesting depth, a range handle), recorded nowhere; no profiler watches an emulated device.
    A CUDA build keeps its own, which works without a GPU."""

    def __init__(self) -> None:
        self._depth = threading.local()
        self._handles = itertools.count(1)

    def rangePushA(self, message: str) -> int:  # noqa: N802 - NVTX's names
        depth = getattr(self._depth, "value", 0)
        self._depth.value = depth + 1
        return depth

    def rangePop(self) -> int:  # noqa: N802
        depth = getattr(self._depth, "value", 0)
        if depth == 0:
            return -1  # NVTX: no range was open
        self._depth.value = depth - 1
        return depth - 1

    def rangeStartA(self, message: str) -> int:  # noqa: N802
        return next(self._handles)

    def rangeEnd(self, handle: int) -> None:  # noqa: N802
        """Nothing records ranges on an emulated device."""

    def deviceRangeStart(self, message: str, stream: Any) -> int:  # noqa: N802
        return next(self._handles)

    def deviceRangeEnd(self, handle: int, stream: Any) -> None:  # noqa: N802
        """Nothing records ranges on an emulated device."""

    def markA(self, message: str) -> None:  # noqa: N802
        """Nothing records marks on an emulated device."""


def _cudnn_is_available() -> bool:
    """False, as the emulated CUDA hooks say: no kernel of the emulated device is cuDNN's, so code that
    asks first (nn.RNN's weight flattening, cudnn.is_acceptable) keeps to the paths the CPU kernels serve."""
    return False


def install(module: Any) -> None:
    """Put the emulated bindings on torch._C and wherever torch.cuda's modules imported the originals."""
    _originals.update(aliases.replace(torch._C, Bindings(module).table(), "torch.cuda"))
    aliases.replace(torch.backends.cudnn, {"is_available": _cudnn_is_available}, "torch.backends")
    if not hasattr(torch._C, "_nvtx"):  # the CPU wheel: torch.cuda.nvtx's stub raises "not installed"
        from torch.cuda import nvtx

        nvtx._nvtx = Nvtx()
