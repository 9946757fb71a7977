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

import time
from collections.abc import Callable
from typing import Any

import torch

from . import aliases, runtime

# The emulated device's clock, for torch.cuda._sleep(cycles): an A100's boost clock.
_CLOCK_HZ = 1.41e9

# torch.cuda's modules, and the torch.backends ones about CUDA.
MODULES = ("torch.cuda", "torch.cuda.memory", "torch.cuda.random", "torch.cuda.streams", "torch.cuda.graphs",
           "torch.cuda.nvtx", "torch.cuda.amp", "torch.cuda.jiterator", "torch.cuda.nccl", "torch.backends.cuda",
           "torch.backends.cudnn")
# Public names of torch.cuda's modules that raise on emulated cuda, and why (the message says so too).
PUBLIC_REFUSED = {
    "CUDAPluggableAllocator": "device memory is the emulator's, not a cudaMalloc-like library's",
    "change_current_allocator": "device memory is the emulator's, not a cudaMalloc-like library's",
    "caching_allocator_alloc": "raw device pointers come from CUDA's caching allocator",
    "caching_allocator_delete": "raw device pointers come from CUDA's caching allocator",
    "MemPool": "user memory pools are CUDA caching-allocator pools (CUDA graphs have their own)",
    "use_mem_pool": "user memory pools are CUDA caching-allocator pools (CUDA graphs have their own)",
    "ExternalStream": "an external stream is a handle of the CUDA driver",
    "get_stream_from_external": "an external stream is a handle of the CUDA driver",
    "GreenContext": "green contexts partition a real GPU's SMs",
    "cudart": "the CUDA runtime library is not loaded", "cudaStatus": "the CUDA runtime library is not loaded",
    "check_error": "the CUDA runtime library is not loaded",
    "list_gpu_processes": "NVML reads a real GPU", "memory_usage": "NVML reads a real GPU",
    "utilization": "NVML reads a real GPU", "temperature": "NVML reads a real GPU",
    "power_draw": "NVML reads a real GPU", "clock_rate": "NVML reads a real GPU",
    "device_memory_used": "NVML reads a real GPU",
    "all_gather": "single-process NCCL across GPUs (torch.cuda.nccl); use torch.distributed",
    "all_reduce": "single-process NCCL across GPUs (torch.cuda.nccl); use torch.distributed",
    "broadcast": "single-process NCCL across GPUs (torch.cuda.nccl); use torch.distributed",
    "reduce": "single-process NCCL across GPUs (torch.cuda.nccl); use torch.distributed",
    "reduce_scatter": "single-process NCCL across GPUs (torch.cuda.nccl); use torch.distributed",
    "cufft_plan_cache": "cuFFT plans belong to cuFFT, which the emulated device does not run (torch's own "
                        "\"Cannot access cuFFT plan cache\" on use)",
    "cuFFTPlanCache": "cuFFT plans belong to cuFFT, which the emulated device does not run",
    "cuFFTPlanCacheManager": "cuFFT plans belong to cuFFT, which the emulated device does not run",
}


class Bindings:
    """The emulated answers of torch._C's _cuda_* bindings over one DeviceModule."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.sync_debug_mode = 0
        self.memory_fraction: dict[int, float] = {}
        self.cudnn_benchmark_limit = 10  # torch's default

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

    def _cuda_getCurrentSolverHandle(self) -> int:  # noqa: N802
        """0: the CPU kernels behind the emulated device use no cuSOLVER handle."""
        return 0

    def _cuda_getCublasWorkspaceSize(self) -> int:  # noqa: N802
        """0: no cuBLAS workspace exists."""
        return 0

    def _cuda_getCublasLtWorkspaceSize(self) -> int:  # noqa: N802
        """0: no cuBLASLt workspace exists."""
        return 0

    def _cuda_setCublasWorkspaceSize(self, size: int) -> None:  # noqa: N802
        """No cuBLAS workspace exists."""

    def _cuda_setCublasLtWorkspaceSize(self, size: int) -> None:  # noqa: N802
        """No cuBLASLt workspace exists."""

    def _cuda_resetCublasWorkspaceSize(self) -> None:  # noqa: N802
        """No cuBLAS workspace exists."""

    def _cuda_resetCublasLtWorkspaceSize(self) -> None:  # noqa: N802
        """No cuBLASLt workspace exists."""

    def _cuda_cudaCachingAllocator_enable(self, enable: bool) -> None:  # noqa: N802
        """The emulated allocator does not cache; there is nothing to switch off."""

    def _cuda_record_memory_history(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        """Accepted; snapshots of the emulated allocator carry no traces."""

    def _cuda_record_memory_history_legacy(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        """Accepted; snapshots of the emulated allocator carry no traces."""

    def _cuda_annotateMemory(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        """Accepted; snapshots of the emulated allocator carry no traces."""

    def _cuda_memoryMetadataSupported(self) -> bool:  # noqa: N802
        return False  # the emulated allocator keeps no per-block metadata

    def _cuda_get_cudnn_benchmark_limit(self) -> int:
        return self.cudnn_benchmark_limit

    def _cuda_set_cudnn_benchmark_limit(self, limit: int) -> None:
        """Recorded and reported back; no cuDNN benchmark runs on the emulated device."""
        self.cudnn_benchmark_limit = int(limit)

    # TunableOp tunes cuBLAS/hipBLASLt GEMMs: it is never enabled on the emulated device.
    def _cuda_tunableop_is_enabled(self) -> bool:  # noqa: N802
        return False

    def _cuda_tunableop_tuning_is_enabled(self) -> bool:  # noqa: N802
        return False

    def _cuda_record_untuned_is_enabled(self) -> bool:  # noqa: N802
        return False

    # ---- the table ----------------------------------------------------------------------------
    # The bindings with nothing to do on a host-synchronous device (each docstring says why); the
    # rest answer as a GPU's runtime would.
    NO_OPS = frozenset({
        "_cuda_synchronize", "_cuda_ipc_collect", "_cuda_set_sync_debug_mode", "_cuda_getCurrentRawStream",
        "_cuda_getCurrentBlasHandle", "_cuda_emptyCache", "_cuda_memorySnapshot", "_cuda_setMemoryFraction",
        "_cuda_resetPeakHostMemoryStats", "_cuda_resetAccumulatedHostMemoryStats", "_cuda_clearCublasWorkspaces",
        "_cuda_hostMemoryStats", "_cuda_getCurrentSolverHandle", "_cuda_getCublasWorkspaceSize",
        "_cuda_getCublasLtWorkspaceSize", "_cuda_setCublasWorkspaceSize", "_cuda_setCublasLtWorkspaceSize",
        "_cuda_resetCublasWorkspaceSize", "_cuda_resetCublasLtWorkspaceSize", "_cuda_cudaCachingAllocator_enable",
        "_cuda_record_memory_history", "_cuda_record_memory_history_legacy", "_cuda_annotateMemory",
        "_cuda_set_cudnn_benchmark_limit", "_cuda_tunableop_is_enabled", "_cuda_tunableop_tuning_is_enabled",
        "_cuda_record_untuned_is_enabled",
    })
    # Bindings that reach what the emulated device does not have, and why: each raises saying so,
    # on a CPU wheel (where torch lacks them) and on a CUDA build (where they would reach the driver).
    REFUSED = {
        "_cuda_getStreamFromExternal": "an external stream is a handle of the CUDA driver, which is not there",
        "_cuda_cudaCachingAllocator_raw_alloc": "raw device pointers come from CUDA's caching allocator; "
                                                "allocate a tensor on the device instead",
        "_cuda_cudaHostAllocator": "CUDA's pinned-memory allocator is the driver's; pin_memory() works",
        "_cuda_customAllocator": "a pluggable allocator allocates device memory through the CUDA runtime",
        "_cuda_changeCurrentAllocator": "a pluggable allocator allocates device memory through the CUDA runtime",
        "_cuda_getAllocator": "a pluggable allocator allocates device memory through the CUDA runtime",
        "_cuda_beginAllocateToPool": "allocating to a pool outside a capture is a caching-allocator detail "
                                     "the emulated pools do not offer; capture a CUDA graph with pool=",
        "_cuda_allocationTraceback": "the emulated allocator records no allocation tracebacks",
        "_cuda_getMemoryMetadata": "the emulated allocator keeps no per-block metadata",
        "_cuda_setMemoryMetadata": "the emulated allocator keeps no per-block metadata",
        "_cuda_getHipblasltVersion": "there is no hipBLASLt behind the emulated device",
        **{f"_cuda_tunableop_{name}": "TunableOp tunes cuBLAS/hipBLASLt GEMMs, and the emulated device runs none"
           for name in ("enable", "tuning_enable", "clear_all", "get_cublaslt_requested_algo_count", "get_filename",
                        "get_max_tuning_duration", "get_max_tuning_iterations", "get_results",
                        "get_rotating_buffer_size", "get_validators", "pop_dynamic_dims_mask",
                        "push_dynamic_dims_mask", "read_file", "set_cublaslt_requested_algo_count", "set_filename",
                        "set_max_tuning_duration", "set_max_tuning_iterations",
                        "set_numerical_check_tolerances", "set_rotating_buffer_size", "wildcard_fallback_enable",
                        "wildcard_fallback_is_enabled", "write_file", "write_file_on_exit")},
        "_cuda_record_untuned_enable": "TunableOp tunes cuBLAS/hipBLASLt GEMMs, and the emulated device runs none",
    }

    # ---- SDPA: which fused kernels the emulated GPU offers ------------------------------------
    # torch.backends.cuda.can_use_*_attention ask these; the emulated device's own backend choice
    # (csrc/cuda_attention.cpp, the model's capability) answers, restricted to one backend.
    def _can_use_flash_attention(self, params: Any, debug: bool = False) -> bool:
        return _sdpa_choice_allows(params, debug, "FLASH_ATTENTION")

    def _can_use_mem_efficient_attention(self, params: Any, debug: bool = False) -> bool:
        return _sdpa_choice_allows(params, debug, "EFFICIENT_ATTENTION")

    def _can_use_cudnn_attention(self, params: Any, debug: bool = False) -> bool:
        return _sdpa_choice_allows(params, debug, "CUDNN_ATTENTION")

    def table(self) -> dict[str, Callable[..., Any]]:
        """torch._C name -> emulated binding, the refusing ones included."""
        answered = {name: getattr(self, name) for name in dir(type(self)) if name.startswith(("_cuda_", "_can_use_"))}
        return {**{name: _refusal(name, why) for name, why in self.REFUSED.items()}, **answered}


def _sdpa_choice_allows(params: Any, debug: bool, backend: str) -> bool:
    """Whether the emulated device's SDPA choice takes `backend` for `params` when only it is enabled."""
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel

    wanted = getattr(SDPBackend, backend)
    with sdpa_kernel([wanted]), warnings.catch_warnings():
        if not debug:
            warnings.simplefilter("ignore")
        try:
            chosen = torch.ops.aten._fused_sdp_choice(params.query, params.key, params.value, params.attn_mask,
                                                      params.dropout, params.is_causal, enable_gqa=params.enable_gqa)
        except RuntimeError:  # "No available kernel": none of the enabled backends fits
            return False
    return chosen == int(wanted.value)


def _refusal(name: str, why: str, prefix: str = "torch._C.") -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"{prefix}{name}: {why}. torchplug's emulated cuda device cannot do this "
                           "(docs/emulation-inventory.md)")

    refuse.__name__ = name
    refuse.torchplug_refused = True
    return refuse


_originals: dict[str, Callable[..., Any]] = {}  # torch's own bindings (a CUDA build's), by name


def original(name: str) -> Callable[..., Any] | None:
    """torch's own binding `name`, as it was before install(), or None where the build lacks it."""
    return _originals.get(name, getattr(torch._C, name, None) if not _originals else None)


class Nvtx:
    """torch._C._nvtx for a torch without it (the CPU wheel), answering as NVTX answers when no profiling
    tool is attached, which is always the case on an emulated device: push and pop return
    NVTX_NO_PUSH_POP_TRACKING (-2), range handles are 0, and nothing is recorded."""

    NO_TOOL = -2  # NVTX_NO_PUSH_POP_TRACKING

    def rangePushA(self, message: str) -> int:  # noqa: N802 - NVTX's names
        return self.NO_TOOL

    def rangePop(self) -> int:  # noqa: N802
        return self.NO_TOOL

    def rangeStartA(self, message: str) -> int:  # noqa: N802
        return 0

    def rangeEnd(self, handle: int) -> None:  # noqa: N802
        """No tool records ranges."""

    def deviceRangeStart(self, message: str, stream: Any) -> int:  # noqa: N802
        return 0

    def deviceRangeEnd(self, handle: int, stream: Any) -> None:  # noqa: N802
        """No tool records ranges."""

    def markA(self, message: str) -> None:  # noqa: N802
        """No tool records marks."""


def _cudnn_is_available() -> bool:
    """False, as the emulated CUDA hooks say: no kernel of the emulated device is cuDNN's, so code that
    asks first (nn.RNN's weight flattening, cudnn.is_acceptable) keeps to the paths the CPU kernels serve."""
    return False


def _refuse_public_names() -> None:
    """The public names the inventory lists as raising: each raises saying why (a class, when it is made)."""
    import importlib

    for module_name in MODULES:
        module = importlib.import_module(module_name)
        refusals = {}
        for name, why in PUBLIC_REFUSED.items():
            found = getattr(module, name, None)
            if getattr(found, "torchplug_refused", False):  # already refused under another module's name
                continue
            if isinstance(found, type):
                refusals[name] = _refusing_class(found, f"{module_name}.{name}", why)
            elif callable(found):  # objects (the cuFFT plan cache) keep torch's own refusal on use
                refusals[name] = _refusal(f"{module_name}.{name}", why, prefix="")
                if hasattr(found, "__wrapped__"):  # Dynamo reads e.g. torch.cuda.use_mem_pool.__wrapped__ at import
                    refusals[name].__wrapped__ = found.__wrapped__
        aliases.replace(module, refusals, "torch.cuda")


def _refusing_class(cls: type, qualified: str, why: str) -> type:
    refuse = _refusal(qualified, why, prefix="")
    return type(cls.__name__, (cls,), {"__new__": lambda cls_, *a, **k: refuse(), "__init__": lambda self, *a, **k: refuse(),
                                       "__module__": cls.__module__, "__doc__": f"Refused on emulated cuda: {why}.",
                                       "torchplug_refused": True})


def install(module: Any) -> None:
    """Put the emulated bindings on torch._C and wherever torch.cuda's modules imported the originals."""
    _originals.update(aliases.replace(torch._C, Bindings(module).table(), "torch.cuda"))
    _refuse_public_names()
    aliases.replace(torch.backends.cudnn, {"is_available": _cudnn_is_available}, "torch.backends")
    if not hasattr(torch._C, "_nvtx"):  # the CPU wheel: torch.cuda.nvtx's stub raises "not installed"
        from torch.cuda import nvtx

        nvtx._nvtx = Nvtx()
