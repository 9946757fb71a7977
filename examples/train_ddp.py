"""Data-parallel training with DistributedDataParallel: ordinary torch code, any device.

    TORCHPLUG_EMULATE=xpu torchrun --nproc-per-node=2 examples/train_ddp.py     # emulated xpu:0, xpu:1
    torchrun --nproc-per-node=2 examples/train_ddp.py --device cpu               # plain CPU on gloo

The process group takes the device's usual backend (nccl, xccl; torchplug's gloo-based one
where the device is emulated). Rank 0 prints the final loss and a checksum of the weights, and
with --save writes them to a file, so runs on different devices can be compared.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def default_device() -> str:
    for name in ("cuda", "xpu", "mps"):
        if getattr(torch, name).is_available():
            return name
    return "cpu"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--save", help="rank 0 writes the trained state_dict here (torch.save, on the CPU)")
    args = parser.parse_args()

    dist.init_process_group()  # no backend named: torch picks the device's own
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    if args.device == "cpu":
        device = torch.device("cpu")
    else:
        getattr(torch, args.device).set_device(local_rank)
        device = torch.device(args.device, local_rank)

    torch.manual_seed(0)  # the same initial weights on every rank and every device
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(device)
    ddp = DistributedDataParallel(model, device_ids=None if device.type == "cpu" else [device])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard, made on the CPU
    for step in range(args.steps):
        x = torch.randn(8, 16, generator=data).to(device)
        y = torch.randn(8, 4, generator=data).to(device)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if rank == 0:
        checksum = sum(float(v.double().sum()) for v in state.values())
        print(f"device={device.type} backend={dist.get_backend()} steps={args.steps} "
              f"loss={loss.item():.6f} checksum={checksum:.6f}")
        if args.save:
            torch.save(state, args.save)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
