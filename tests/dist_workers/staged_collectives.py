"""Collectives on a device whose memory the host cannot read (staged through its copies), on 2 ranks,
each against the same call on CPU tensors in the same job.

argv: device type, backend name ("" for init_process_group's default). Every case runs on CPU
tensors, then on the device (this rank's own device index), synchronously and with async_op=True
(waited, or read through the Work's future as DDP's comm hooks do); then DDP trains on both with
two comm hooks; then wrong calls are made, each of which must be refused before any data moves.
Reports what differs and each refusal's message.
"""

import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from job import init, refusal, report

device_type, backend = sys.argv[1], sys.argv[2]
rank = init(backend)
world = dist.get_world_size()
device = torch.device(device_type, rank)
getattr(torch, device_type).set_device(rank)
CPU = torch.device("cpu")
failures: dict[str, str] = {}


def data(shape: tuple[int, ...], on: torch.device, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank-dependent values, made on the CPU and moved (the same bytes on both sides)."""
    numel = torch.Size(shape).numel()
    values = torch.arange(numel, dtype=torch.float64).reshape(shape) * (rank + 1) + 10 * rank + salt
    return values.to(dtype).to(on)


def filled(shape: tuple[int, ...], on: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, -7, dtype=dtype).to(on)


# Each case calls collectives on tensors made on `on` and returns (works, the tensors to compare).
# With async_op it passes async_op=True and returns the works, which the harness waits on.
def all_reduce(on, dtype, async_op):
    t = data((5, 3), on, dtype)
    return [dist.all_reduce(t, async_op=async_op)], [t]


def all_reduce_max(on, dtype, async_op):
    t = data((4,), on, dtype)
    return [dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=async_op)], [t]


def broadcast(on, dtype, async_op):
    t = data((6,), on, dtype)
    return [dist.broadcast(t, src=1, async_op=async_op)], [t]


def all_gather(on, dtype, async_op):
    outs = [filled((2, 3), on, dtype) for _ in range(world)]
    source = data((2, 3), on, dtype)
    return [dist.all_gather(outs, source, async_op=async_op)], [*outs, source]


def all_gather_into_tensor(on, dtype, async_op):
    out = filled((2 * world, 3), on, dtype)
    return [dist.all_gather_into_tensor(out, data((2, 3), on, dtype), async_op=async_op)], [out]


def reduce_scatter(on, dtype, async_op):
    out = filled((3,), on, dtype)
    inputs = [data((3,), on, dtype, salt=r) for r in range(world)]
    return [dist.reduce_scatter(out, inputs, async_op=async_op)], [out, *inputs]


def reduce_scatter_tensor(on, dtype, async_op):
    out = filled((2,), on, dtype)
    source = data((2 * world,), on, dtype)
    return [dist.reduce_scatter_tensor(out, source, async_op=async_op)], [out, source]


def all_to_all_single(on, dtype, async_op):
    out = filled((2 * world,), on, dtype)
    return [dist.all_to_all_single(out, data((2 * world,), on, dtype), async_op=async_op)], [out]


def reduce(on, dtype, async_op):
    t = data((3,), on, dtype)
    return [dist.reduce(t, dst=0, async_op=async_op)], [t]  # a non-root's too: gloo may write it


def gather(on, dtype, async_op):
    outs = [filled((2,), on, dtype) for _ in range(world)] if rank == 0 else None
    return [dist.gather(data((2,), on, dtype), outs, dst=0, async_op=async_op)], outs or []


def scatter(on, dtype, async_op):
    out = filled((2,), on, dtype)
    pieces = [data((2,), on, dtype, salt=r) for r in range(world)] if rank == 0 else None
    return [dist.scatter(out, pieces, src=0, async_op=async_op)], [out]


def send_recv(on, dtype, async_op):
    t = data((4,), on, dtype) if rank == 0 else filled((4,), on, dtype)
    call = (dist.isend if async_op else dist.send) if rank == 0 else (dist.irecv if async_op else dist.recv)
    work = call(t, 1 - rank)
    return [work if async_op else None], [t]


def broadcast_coalesced(on, dtype, async_op):  # DDP's _sync_module_states: parameters from rank 0
    tensors = [data((3, 2), on, dtype), data((5,), on, dtype, salt=1)]
    dist._broadcast_coalesced(dist.group.WORLD, tensors, 1 << 20, 0)
    return [], tensors


def comm_hook_future(on, dtype, async_op):  # DDP's allreduce hook: the future's value, divided in a callback
    t = data((7,), on, dtype)
    future = dist.all_reduce(t, async_op=True).get_future()
    return [], [future.then(lambda f: f.value()[0].div_(world, rounding_mode="floor")).wait()]


CASES: dict[str, Callable] = {f.__name__: f for f in (
    all_reduce, all_reduce_max, broadcast, all_gather, all_gather_into_tensor, reduce_scatter,
    reduce_scatter_tensor, all_to_all_single, reduce, gather, scatter, send_recv, broadcast_coalesced,
    comm_hook_future)}
SYNC_ONLY = {"broadcast_coalesced", "comm_hook_future"}


def run(case: Callable, on: torch.device, dtype: torch.dtype, async_op: bool) -> tuple[list, list[bool]]:
    """The case's tensors (on the CPU) after its works are waited on, and whether each work then reports completion."""
    works, tensors = case(on, dtype, async_op)
    works = [work for work in works if work is not None and async_op]
    for work in works:
        work.wait()
    if on != CPU and any(t.device != on for t in tensors):
        failures[f"{case.__name__}/device"] = f"results on {[str(t.device) for t in tensors]}, expected {on}"
    return [t.cpu() for t in tensors], [work.is_completed() for work in works]


for dtype in (torch.float32, torch.bfloat16, torch.int64):
    for name, case in CASES.items():
        for async_op in (False, True):
            if async_op and name in SYNC_ONLY:
                continue
            key = f"{name}/{str(dtype).removeprefix('torch.')}/{'async' if async_op else 'sync'}"
            (want, cpu_done), (got, done) = run(case, CPU, dtype, async_op), run(case, device, dtype, async_op)
            if len(want) != len(got) or not all(torch.equal(w, g) for w, g in zip(want, got)):
                failures[key] = f"got {[g.tolist() for g in got]}, the CPU's {[w.tolist() for w in want]}"
            if done != cpu_done:  # gloo's reduce_scatter works never report completion, on the CPU too
                failures[f"{key}/is_completed"] = f"{done} after wait(), the CPU's {cpu_done}"

# The Work's future completes with the caller's device tensors, holding the results.
t = data((3,), device, torch.float32)
(value,) = dist.all_reduce(t, async_op=True).get_future().wait()
if value.device != device or value.data_ptr() != t.data_ptr() or value.cpu().tolist() != [10.0, 13.0, 16.0]:
    failures["future_value"] = f"{value.device} {value.cpu().tolist()}"

# A strided view is reduced and written back through the view; the other columns stay. The reference
# reduces a contiguous copy: torch 2.13's gloo, given a non-contiguous CPU tensor, reduces its first
# numel elements of memory instead (it left rows 2-3 of this case alone and summed rows 0-1 whole).
for async_op in (False, True):
    t = data((4, 6), device, torch.float32)
    work = dist.all_reduce(t[:, ::2], async_op=async_op)
    if async_op:
        work.wait()
    want = data((4, 6), CPU, torch.float32)
    columns = want[:, ::2].contiguous()
    dist.all_reduce(columns)
    want[:, ::2] = columns
    if not torch.equal(t.cpu(), want):
        failures[f"all_reduce_strided_view/{async_op}"] = f"got {t.cpu().tolist()}, expected {want.tolist()}"


def ddp_weights(on: torch.device, hook, bucket_cap_mb: float | None = None) -> torch.Tensor:
    """Six steps of DDP (with comm `hook`, None for DDP's own allreduce) on `on`: the weights, flat, on the CPU."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(on)
    ddp = DistributedDataParallel(net, device_ids=None if on.type == "cpu" else [on], bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(1000 + rank)
    for _ in range(6):
        x, y = torch.randn(8, 16, generator=generator).to(on), torch.randn(8, 4, generator=generator).to(on)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return torch.cat([p.detach().cpu().flatten() for p in net.parameters()])


# Small buckets: one per parameter, so several staged all_reduces are in flight in each backward.
for name, hook, cap in (("ddp", None, None), ("ddp_fp16_compress_hook", default_hooks.fp16_compress_hook, None),
                        ("ddp_small_buckets", None, 1e-4)):
    want, got = ddp_weights(CPU, hook, cap), ddp_weights(device, hook, cap)
    if not torch.equal(want, got):
        failures[name] = f"weights differ from the CPU's by up to {(want - got).abs().max().item()}"

# Wrong calls: each is refused on both ranks before any data moves (else the ranks would fall out
# of step, or the untouched tensors change).
errors: dict[str, str] = {}


out = filled((4,), device, torch.float32)
errors["cpu_input"] = refusal(lambda: dist.all_gather_into_tensor(out, torch.ones(2)), out)
outs = [filled((2,), device, torch.float32) for _ in range(world)]
errors["cpu_input_list"] = refusal(lambda: dist.all_gather(outs, torch.ones(2)), *outs)
other = torch.ones(2, device=torch.device(device_type, 1 - rank))
errors["other_device_input"] = refusal(lambda: dist.all_gather_into_tensor(out, other), out, other)
cpu_only = dist.new_group([0, 1], backend="cpu:gloo")
t = data((3,), device, torch.float32)
errors["group_without_the_device"] = refusal(lambda: dist.all_reduce(t, group=cpu_only), t)
t = torch.ones(3, device=device)
dist.all_reduce(t)  # the ranks are still in step

dist.barrier()
report({"rank": rank, "backend": str(dist.get_backend()), "failures": failures, "errors": errors,
        "after": t.cpu().tolist()})
dist.destroy_process_group()
