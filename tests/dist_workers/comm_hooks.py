"""DDP communication hooks and FSDP2 mixed precision on 2 ranks: what GPU training code registers.

argv: device ("cuda" for emulated cuda, where the group is made with "nccl" and NCCL options, as
on a GPU machine; "cpu" for the gloo reference), a path where rank 0 saves each case's weights.
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from job import init, report

device_type, save = sys.argv[1], sys.argv[2]
if device_type == "cuda":
    dist.init_process_group("nccl", pg_options=dist.ProcessGroupNCCL.Options(is_high_priority_stream=True))
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
else:
    rank = init("gloo")
    device = torch.device("cpu")


def cpu_bf16_compress_hook(state, bucket):
    """bf16_compress_hook under another name: DDP refuses that name without CUDA and NCCL (the reference)."""
    return default_hooks.bf16_compress_hook(state, bucket)


HOOKS = {
    "fp16_compress": (None, default_hooks.fp16_compress_hook),
    "bf16_compress": (None, default_hooks.bf16_compress_hook if device_type == "cuda" else cpu_bf16_compress_hook),
    "powerSGD": (lambda: powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=2),
                 powerSGD_hook.powerSGD_hook),
}


def batches(steps: int):
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    for _ in range(steps):
        yield torch.randn(8, 16, generator=data).to(device), torch.randn(8, 4, generator=data).to(device)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(device)


def train_ddp(state_factory, hook) -> dict:
    net = model()
    ddp = DistributedDataParallel(net, device_ids=None if device.type == "cpu" else [device])
    ddp.register_comm_hook(state_factory() if state_factory else None, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(6):
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.detach().cpu() for k, v in net.state_dict().items()}


def train_fsdp(param_dtype: torch.dtype, reduce_dtype: torch.dtype) -> dict:
    net = model()
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    mesh = dist.init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(net, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for x, y in batches(4):
        loss = torch.nn.functional.mse_loss(net(x).float(), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.full_tensor().detach().cpu() for k, v in net.state_dict().items()}


trained = {name: train_ddp(*hook) for name, hook in HOOKS.items()}
trained["fsdp2_bf16_params_fp32_reduce"] = train_fsdp(torch.bfloat16, torch.float32)
trained["fsdp2_bf16_params_bf16_reduce"] = train_fsdp(torch.bfloat16, torch.bfloat16)
if rank == 0:
    torch.save(trained, save)
report({"rank": rank, "backend": str(dist.get_backend()), "cases": sorted(trained)})
dist.barrier()
dist.destroy_process_group()
