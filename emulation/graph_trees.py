"""The private torch._C bindings Inductor's CUDA graphs call, answered by the emulated cuda runtime.

torch.compile(mode="reduce-overhead") wraps compiled graphs in CUDA graphs: cudagraph trees
(torch/_inductor/cudagraph_trees.py, the default) or one graph per compiled function
(compile_fx.cudagraphify_impl). Trees run warmups and recordings in one private memory pool that
they checkpoint and restore as they move between graphs, and reconstruct each replay's outputs from
data pointers into the pool. They ask the CUDA caching allocator for that through torch._C bindings
that a CPU build of torch lacks and that, on a CUDA build, are bound to the real allocator. With
cuda emulated, the emulated allocator's graph pools (csrc/graphs.cpp) answer them instead:

  _cuda_beginAllocateCurrentThreadToPool / _cuda_endAllocateToPool / _cuda_releasePool: route the
      thread's allocations to a pool, stop, give the pool up;
  _cuda_getCheckpointState / _cuda_setCheckpointPoolState: a pool's allocated blocks, and setting
      them back (blocks allocated since are freed; live storages get the allocator's deleter);
  _cuda_cudaCachingAllocator_raw_delete, _free_And_Remove_DeleterFn, _has_Standard_Deleter: free a
      block by pointer or through its storage, and ask whether a storage owns its block;
  _cuda_checkPoolLiveAllocations: whether the pool's allocated blocks are exactly the given ones;
  _set_storage_access_error_msg, _set_storage_data_ptr_access_error_msg: make a tensor or storage
      whose memory a later replay overwrites raise when it is used;
  _tensors_data_ptrs_at_indices_equal, _construct_CUDA_Tensor_From_Storage_And_Metadata: data
      pointer checks and output reconstruction, in Python;
  _cuda_isHistoryEnabled (False), and the cuDNN benchmark-cache switch (no cuDNN).
The allocator bindings that are not about pools are cuda_bindings.py's.
"""

import gc
from typing import Any

import torch

from ..entrypoints.torch_devices import CUDA
from . import runtime

_conv_benchmark_empty_cache = True  # torch's default; there is no cuDNN to obey it


def _ext() -> Any:
    return runtime.extension()


def _begin_allocate_to_pool(device: int, pool: tuple[int, int]) -> None:
    _ext().graph_begin_thread_pool(CUDA.dispatch_key, int(device), tuple(pool))


def _end_allocate_to_pool(device: int, pool: tuple[int, int]) -> None:
    _ext().graph_end_thread_pool(CUDA.dispatch_key, int(device), tuple(pool))


def _release_pool(device: int, pool: tuple[int, int]) -> None:
    _ext().graph_pool_release(tuple(pool))


def _get_checkpoint_state(device: int, pool: tuple[int, int]) -> Any:
    return _ext().graph_checkpoint(tuple(pool))


def _set_checkpoint_pool_state(device: int, state: Any, stale_storages: list[int],
                               storages_to_add_deleters_to: list[int] | None = None) -> None:
    _ext().graph_set_checkpoint(state, list(stale_storages), list(storages_to_add_deleters_to or ()))


def _check_pool_live_allocations(device: int, pool: tuple[int, int], data_ptrs: set[int]) -> bool:
    if _ext().graph_pool_live_equals(tuple(pool), set(data_ptrs), False):
        return True
    # What trees do next on a mismatch, before they look for the culprit in a memory snapshot: free
    # tensors only reference cycles keep (in fidelity mode Triton's interpreter leaves some). Storages
    # among `data_ptrs` may die then too; what must not remain is an allocation nobody accounts for.
    gc.collect()
    return _ext().graph_pool_live_equals(tuple(pool), set(data_ptrs), True)


def _set_storage_access_error_msg(tensor: torch.Tensor, message: str) -> None:
    _ext().graph_poison_tensor(tensor._cdata, message)


def _set_storage_data_ptr_access_error_msg(storage: int, message: str) -> None:
    _ext().graph_poison_storage(storage, message)


def _tensors_data_ptrs_at_indices_equal(tensors: list[Any], data_ptrs: list[int | None], indices: list[int]) -> bool:
    for index in indices:
        tensor = tensors[index]
        if isinstance(tensor, torch.Tensor) and tensor.data_ptr() != data_ptrs[index]:
            return False
    return True


def _construct_tensor(metadata: dict[str, Any], storage: Any) -> torch.Tensor:
    tensor = torch.empty((0,), dtype=metadata["dtype"], device=metadata["device"])
    return tensor.set_(storage, metadata["storage_offset"], metadata["size"], metadata["stride"])


def _get_conv_benchmark_empty_cache() -> bool:
    return _conv_benchmark_empty_cache


def _set_conv_benchmark_empty_cache(enabled: bool) -> None:
    global _conv_benchmark_empty_cache
    _conv_benchmark_empty_cache = bool(enabled)


BINDINGS = {
    "_cuda_beginAllocateCurrentThreadToPool": _begin_allocate_to_pool,
    "_cuda_endAllocateToPool": _end_allocate_to_pool,
    "_cuda_releasePool": _release_pool,
    "_cuda_getCheckpointState": _get_checkpoint_state,
    "_cuda_setCheckpointPoolState": _set_checkpoint_pool_state,
    "_cuda_checkPoolLiveAllocations": _check_pool_live_allocations,
    "_cuda_cudaCachingAllocator_raw_delete": lambda ptr: _ext().graph_raw_delete(ptr),
    "_free_And_Remove_DeleterFn": lambda storage: _ext().graph_free_and_remove_deleter(storage),
    "_has_Standard_Deleter": lambda storage: _ext().graph_has_block_deleter(storage),
    "_set_storage_access_error_msg": _set_storage_access_error_msg,
    "_set_storage_data_ptr_access_error_msg": _set_storage_data_ptr_access_error_msg,
    "_tensors_data_ptrs_at_indices_equal": _tensors_data_ptrs_at_indices_equal,
    "_construct_CUDA_Tensor_From_Storage_And_Metadata": _construct_tensor,
    "_cuda_isHistoryEnabled": lambda: False,
    "_cuda_get_conv_benchmark_empty_cache": _get_conv_benchmark_empty_cache,
    "_cudnn_set_conv_benchmark_empty_cache": _set_conv_benchmark_empty_cache,
}


def install() -> None:
    """Bind them on torch._C (emulated cuda only: on a CUDA build they replace the real allocator's)."""
    for name, function in BINDINGS.items():
        setattr(torch._C, name, function)
