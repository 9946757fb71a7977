"""all_gather with outputs of different sizes, which NCCL and XCCL accept and gloo does not.

NCCL runs an uneven all_gather as one broadcast per rank; so do we, on host aliases: each rank
copies its input into its own output slot, then every slot is broadcast from its owner.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future


def allgather(op: Callable[..., Any]) -> Callable[..., Any]:
    """c10d::allgather_ on host aliases (`op` runs its CPU kernel): gloo's allgather, or broadcasts if uneven."""

    def run(output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], group: torch.ScriptObject,
            *args: Any, **kwargs: Any) -> tuple[list[list[torch.Tensor]], torch.ScriptObject]:
        if all(_same_shapes(outputs) for outputs in output_lists):
            return op(output_lists, inputs, group, *args, **kwargs)
        if len(output_lists) != 1 or len(inputs) != 1:
            raise ValueError("an uneven all_gather takes one input tensor and one list of outputs")
        return output_lists, _broadcast_each(output_lists[0], inputs[0], dist.ProcessGroup.unbox(group))

    return run


def _same_shapes(tensors: list[torch.Tensor]) -> bool:
    return len({t.shape for t in tensors}) <= 1


def _broadcast_each(outputs: list[torch.Tensor], input: torch.Tensor, group: dist.ProcessGroup) -> torch.ScriptObject:
    rank = group.rank()
    if outputs[rank].shape != input.shape:
        raise ValueError(
            f"all_gather: rank {rank}'s output slot has shape {tuple(outputs[rank].shape)} but its input has "
            f"shape {tuple(input.shape)}; output_tensor_list[{rank}] must match this rank's input"
        )
    outputs[rank].copy_(input)
    works = []
    for root, slot in enumerate(outputs):
        options = dist.BroadcastOptions()
        options.rootRank = root
        works.append(group.broadcast([slot], options))

    def gathered(all_done: torch.futures.Future) -> list[list[torch.Tensor]]:
        for future in all_done.value():
            future.wait()  # raises the first broadcast's error, if any
        return [outputs]

    done = torch.futures.collect_all([w.get_future() for w in works])
    return _create_work_from_future(done.then(gathered)).boxed()
