"""destroy_process_group must free what the group held: gloo's threads, the device memory and the
collective work torchplug keeps until gloo's worker threads let go of it.

One rank suffices (gloo still builds its context, threads and buffers). Reports the process's
native thread count and the xpu memory counters before, during and after the group.
"""

import os

import torch
import torch.distributed as dist

from job import init, report
from torchplug.distributed import host_route, peers


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


xpu = torch.device("xpu", 0)
torch.ones(1, device=xpu)  # load the runtime (and its threads) before the baseline
before = {"threads": threads(), "allocated": torch.xpu.memory_allocated(xpu)}
init("xccl")
tensors = [torch.randn(1 << 16, device=xpu) for _ in range(4)]
for t in tensors:
    dist.all_reduce(t)
out = torch.empty(1 << 16, device=xpu)
dist.all_gather_into_tensor(out, tensors[0])
dist.barrier()
during = {"threads": threads(), "allocated": torch.xpu.memory_allocated(xpu), "kept": host_route._extension.kept()}
del tensors, t, out
dist.destroy_process_group()
after = {"threads": threads(), "allocated": torch.xpu.memory_allocated(xpu), "groups": len(peers._groups),
         "kept": host_route._extension.kept()}
report({"before": before, "during": during, "after": after, "initialized": dist.is_initialized()})
