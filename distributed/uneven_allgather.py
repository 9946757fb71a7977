"""all_gather with outputs of different sizes, which NCCL and XCCL accept and gloo does not.

NCCL runs an uneven all_gather as one broadcast per rank; so do we, on host aliases: each rank
copies its input into its own output slot, then every slot is broadcast from its owner. The C++
route (csrc/host_route.cpp) calls this for c10d::allgather_ when the outputs differ in shape, as
the op torchplug_distributed::uneven_allgather, so the dispatcher converts its arguments and Work.
"""

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future


def allgather(output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
              group: torch.ScriptObject) -> torch.ScriptObject:
    """The uneven all_gather on host aliases; a boxed Work whose future completes with the outputs."""
    if len(output_lists) != 1 or len(inputs) != 1:
        raise ValueError("an uneven all_gather takes one input tensor and one list of outputs")
    outputs, input, group = output_lists[0], inputs[0], dist.ProcessGroup.unbox(group)
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


_library = torch.library.Library("torchplug_distributed", "DEF")
_library.define("uneven_allgather(Tensor[][] output_lists, Tensor[] inputs, "
                "__torch__.torch.classes.c10d.ProcessGroup group) -> __torch__.torch.classes.c10d.Work")
_library.impl("uneven_allgather", allgather, "CPU")
