"""Every collective torchplug's emulated backend covers, in fp32, fp16 and bf16, on 2 ranks.

argv: device type, backend name ("" for init_process_group's default). Reports what failed.
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from job import init, report

device_type, backend = sys.argv[1], sys.argv[2]
rank = init(backend)
world = dist.get_world_size()
device = torch.device(device_type, 0)
failures: dict[str, str] = {}


def expect(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if got.device != device:
        failures[name] = f"result on {got.device}, expected {device}"
    elif not torch.equal(got.cpu(), want):
        failures[name] = f"got {got.cpu().tolist()}, expected {want.tolist()}"


for dtype in (torch.float32, torch.float16, torch.bfloat16):
    d = str(dtype).removeprefix("torch.")

    def full(shape, value):
        return torch.full(shape, float(value), dtype=dtype, device=device)

    t = full((5,), rank + 1)
    dist.all_reduce(t)
    expect(f"all_reduce/{d}", t, torch.full((5,), 3.0, dtype=dtype))

    t = full((3,), rank)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    expect(f"all_reduce_max/{d}", t, torch.full((3,), 1.0, dtype=dtype))

    t = full((4,), 10 + rank)
    dist.broadcast(t, src=1)
    expect(f"broadcast/{d}", t, torch.full((4,), 11.0, dtype=dtype))

    outs = [full((2,), -1) for _ in range(world)]
    dist.all_gather(outs, full((2,), rank))
    expect(f"all_gather/{d}", torch.stack(outs), torch.tensor([[0, 0], [1, 1]], dtype=dtype))

    outs = [full((r + 1,), -1) for r in range(world)]  # rank r contributes r + 1 elements
    dist.all_gather(outs, full((rank + 1,), rank + 5))
    expect(f"all_gather_uneven/{d}", torch.cat(outs), torch.tensor([5, 6, 6], dtype=dtype))

    out = full((4,), -1)
    dist.all_gather_into_tensor(out, full((2,), rank))
    expect(f"all_gather_into_tensor/{d}", out, torch.tensor([0, 0, 1, 1], dtype=dtype))

    out = full((2,), -1)
    dist.reduce_scatter_tensor(out, torch.arange(4, dtype=dtype, device=device) + rank)
    expect(f"reduce_scatter_tensor/{d}", out, torch.tensor([1, 3], dtype=dtype) + 4 * rank)

    if rank == 0:
        dist.send(full((3,), 42), dst=1)
    else:
        t = full((3,), 0)
        dist.recv(t, src=0)
        expect(f"send_recv/{d}", t, torch.full((3,), 42.0, dtype=dtype))

    t = full((6,), rank + 1)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    expect(f"async_all_reduce/{d}", t, torch.full((6,), 3.0, dtype=dtype))
    (value,) = work.get_future().value()
    if value is not t and value.data_ptr() != t.data_ptr():
        failures[f"async_future/{d}"] = f"the future's value is {value.device} memory, not the caller's tensor"

# Beyond the c10d ops themselves: a subgroup, a functional collective (DTensor, torch.compile) and
# object collectives (which pick the group's device).
t = torch.ones(3, device=device)
dist.all_reduce(t, group=dist.new_group([0, 1]))
expect("new_group_all_reduce", t, torch.full((3,), 2.0))
expect("functional_all_reduce", funcol.all_reduce(torch.ones(2, device=device) * (rank + 1), "sum", dist.group.WORLD),
       torch.full((2,), 3.0))
gathered: list = [None] * world
dist.all_gather_object(gathered, {"rank": rank})
if gathered != [{"rank": r} for r in range(world)]:
    failures["all_gather_object"] = repr(gathered)

dist.barrier()
report({"rank": rank, "backend": str(dist.get_backend()), "failures": failures})
dist.destroy_process_group()
