"""Sharded training with FSDP2 (torch.distributed.fsdp.fully_shard): ordinary torch code, any device.

    TORCHPLUG_EMULATE=xpu torchrun --nproc-per-node=2 examples/train_fsdp.py     # emulated xpu:0, xpu:1
    torchrun --nproc-per-node=2 examples/train_fsdp.py --device cpu              # plain CPU on gloo

(On real GPUs the first line without TORCHPLUG_EMULATE trains on cuda with NCCL; TORCHPLUG_EMULATE=cuda
trains the same on emulated cuda with torch's CPU wheel.)

Each rank holds half of every parameter; all_gather_into_tensor rebuilds them for the forward and
backward, and reduce_scatter_tensor shards the gradients. Rank 0 prints the final loss and a
checksum of the full weights, and with --save writes them, for comparison with a CPU run.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def default_device() -> str:
    for name in ("cuda", "xpu", "mps"):
        if getattr(torch, name).is_available():
            return name
    return "cpu"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save", help="rank 0 writes the trained full state_dict here (torch.save, on the CPU)")
    args = parser.parse_args()

    dist.init_process_group()
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    if args.device == "cpu":
        device = torch.device("cpu")
    else:
        getattr(torch, args.device).set_device(local_rank)
        device = torch.device(args.device, local_rank)
    mesh = dist.init_device_mesh(device.type, (dist.get_world_size(),))

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 4),
    ).to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    data = torch.Generator().manual_seed(1000 + rank)
    for _ in range(args.steps):
        x = torch.randn(8, 16, generator=data).to(device)
        y = torch.randn(8, 4, generator=data).to(device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    # full_tensor() all-gathers each shard; every rank takes part, rank 0 reports.
    state = {k: v.full_tensor().detach().cpu() for k, v in model.state_dict().items()}
    if rank == 0:
        checksum = sum(float(v.double().sum()) for v in state.values())
        print(f"device={device.type} backend={dist.get_backend()} steps={args.steps} "
              f"loss={loss.item():.6f} checksum={checksum:.6f}")
        if args.save:
            torch.save(state, args.save)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
